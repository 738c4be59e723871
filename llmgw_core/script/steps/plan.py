"""The `plan` step: does a model fit the fleet, and how — every file, every way.

```yaml
fleet:
  - {name: dgx, count: 2, gpu: h100-80g, gpus: 8, fabric: ib-a}
steps:
  - plan: {model: catalog:meta-llama/Llama-3.3-70B-Instruct, context: 32768}
```

`model` is a Hub id, a local directory (relative to the script), or
`catalog:org/name` for a model whose facts ship with llmgw (offline). The
result lists every artifact with its best way, the best way overall and every
way best first; when nothing fits the step fails with exit code 3 and says
what would change that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from llmgw_core.errors import BadInput
from llmgw_core.script.registry import (
    EXIT_DOES_NOT_FIT,
    StepArgs,
    StepContext,
    StepOutcome,
    step,
)


class PlanArgs(StepArgs):
    """Arguments of `plan`."""

    model: str = Field(min_length=1)
    format: Literal["gguf", "safetensors", "both"] | None = None
    context: int | None = Field(default=None, gt=0, le=16_777_216)
    concurrency: int = Field(default=1, ge=1, le=65_536)
    precision: str | None = None
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)


def model_for(ref: str, script_dir: Path) -> Any:
    """The model a step names: from the offline catalog, a directory, or the Hub.

    A relative directory is read relative to the script, not to wherever the
    runner was started.
    """
    from llmgw_core.catalog import catalog_model, is_catalog_ref

    if is_catalog_ref(ref):
        return catalog_model(ref)
    from llmgw_core.model.source import load_model

    if ref.startswith(("./", "../")):
        ref = str((script_dir / ref).resolve())
    return load_model(ref)


def fleet_for(ctx: StepContext) -> Any:
    """The fleet a plan is made against.

    A described fleet (`fleet:` in the script) is planned as written. Planning
    against a live fleet arrives with the fleet's facts: it will build the
    same `Fleet` from them with `Fleet.from_nodes`, and this function is where
    it plugs in.

    Raises:
        BadInput: the script describes no fleet.
    """
    from llmgw_core.pools import described_fleet

    if ctx.described_fleet:
        return described_fleet(ctx.described_fleet)
    raise BadInput(
        "this step needs `fleet:` in the script until live planning lands",
        "describe the fleet, e.g. fleet: [{name: dgx, count: 2, gpu: h100-80g, gpus: 8, fabric: ib-a}]",
    )


def _shape_summary(model: Any) -> dict[str, Any] | None:
    shape = model.shape or next((a.shape for a in model.artifacts if a.shape), None)
    if shape is None:
        return None
    params = next((a.param_count for a in model.artifacts if a.param_count), None)
    if params is None:
        from llmgw_core.model.params import count_parameters

        params = count_parameters(shape).main  # counted from the architecture, layer by layer
    return {
        "architecture": shape.architecture,
        "layers": shape.num_layers,
        "attention_heads": shape.num_attention_heads,
        "kv_heads": shape.num_kv_heads,
        "experts": shape.num_experts,
        "max_context": shape.max_context,
        "dtype": shape.dtype,
        "parameters": params,
    }


def run_plan(args: PlanArgs, ctx: StepContext) -> StepOutcome:
    """Plan the model against the fleet; exit 3 with what would help when nothing fits."""
    from llmgw_core.plan import plan

    fleet = fleet_for(ctx)
    model = model_for(args.model, ctx.script_dir)
    summary = _shape_summary(model)
    context = args.context or (summary["max_context"] if summary else None)
    if context is None:
        raise BadInput(f"{args.model}: the trained context is unknown", "give `context:` in tokens")
    result = plan(
        model,
        fleet,
        format=args.format,
        context=context,
        concurrency=args.concurrency,
        precision=args.precision,
        gpu_memory_utilization=args.gpu_memory_utilization,
    )
    if not result.artifacts:
        wanted = " ".join(x for x in (args.format, args.precision) if x)
        raise BadInput(
            f"{args.model} has no {wanted + ' ' if wanted else ''}files to plan",
            "drop `format:` / `precision:` to plan every file it has",
        )
    body = result.as_dict()
    body["shape"] = summary
    if result.best is None:
        return StepOutcome(
            result=body,
            ok=False,
            exit_code=EXIT_DOES_NOT_FIT,
            error=result.does_not_fit_sentence(),
        )
    return StepOutcome(result=body)


def render_plan(result: dict[str, Any]) -> Any:
    """The plan as Rich tables for people (the same result `--json` prints)."""
    from llmgw_core.script.steps.plan_render import render

    return render(result)


step("plan", args=PlanArgs, render=render_plan)(run_plan)
