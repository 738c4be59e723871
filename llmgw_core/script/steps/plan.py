"""The `plan` step: does a model fit the fleet, and how — every file, every way.

```yaml
fleet:
  - {name: dgx, count: 2, gpu: h100-80g, gpus: 8, fabric: ib-a}
steps:
  - plan: {model: catalog:meta-llama/Llama-3.3-70B-Instruct, context: 32768}
```

`model` is a Hub id, a local directory (relative to the script), or
`catalog:org/name` for a model whose facts ship with llmgw (offline); with
`--demo` a Hub id the catalog ships is planned from it. Without `fleet:` the
plan is made against the live fleet (`--demo`, `--inventory FILE`); with
`cluster: NAME`, against that Slurm cluster's partition as its scheduler
describes it, every available node counted (the scheduler, not the plan,
says which are free when the job is submitted). The
result lists every artifact with its best way, the best way overall and every
way best first; when nothing fits the step fails with exit code 3 and says
what would change that.
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from llmgw_core.arguments import ModelRef
from llmgw_core.errors import BadInput
from llmgw_core.script.registry import (
    EXIT_DOES_NOT_FIT,
    StepArgs,
    StepContext,
    StepOutcome,
    step,
)
from llmgw_core.serve.args import AdapterFields

if TYPE_CHECKING:
    from llmgw_core.model.source import ModelInfo
    from llmgw_core.planner.pools import Fleet


class PlanArgs(StepArgs, AdapterFields):
    """Arguments of `plan` (its adapters checked as `serve` checks them)."""

    model: ModelRef
    format: Literal["gguf", "safetensors", "both"] | None = None
    context: int | None = Field(default=None, gt=0, le=16_777_216)
    concurrency: int = Field(default=1, ge=1, le=65_536)
    precision: str | None = None
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    cluster: str | None = Field(default=None, min_length=1)
    """A Slurm cluster of the inventory: plan against its partition as the scheduler describes
    it (what `serve` with `cluster:` sizes its job by), not against the SSH nodes."""


def model_for(ref: str, script_dir: Path, *, offline: bool | None = None) -> ModelInfo:
    """The model a step names: the catalog, a path relative to the script, or the Hub.

    The rule is `llmgw_core.catalog.resolve.resolve_model`'s: `offline=True`
    (the demo) plans models the catalog ships from it; otherwise the Hub is
    read, and the catalog stands in only when the Hub cannot be reached.
    """
    from llmgw_core.catalog.resolve import resolve_model

    return resolve_model(ref, script_dir=script_dir, offline=offline)


def step_model(ref: str, ctx: StepContext) -> ModelInfo:
    """The model a step names, offline in the demo (see `model_for`)."""
    return model_for(ref, ctx.script_dir, offline=True if ctx.demo else None)


async def fleet_for(ctx: StepContext, cluster: str | None = None) -> Fleet:
    """The fleet a plan is made against; with `cluster`, that Slurm cluster's partition
    (`cluster_fleet`).

    A described fleet (`fleet:` in the script) is planned as written;
    otherwise the live fleet (`--inventory FILE` or `--demo`) as its nodes
    report themselves now, cards held by a replica marked busy.

    Raises:
        BadInput: the script describes no fleet and runs without one.
    """
    from llmgw_core.planner.pools import described_fleet

    if cluster is not None:
        return await cluster_fleet(cluster, ctx)
    if ctx.described_fleet:
        return described_fleet(ctx.described_fleet)
    if not ctx.has_live_fleet:
        raise BadInput(
            "this step needs a fleet: `fleet:` in the script, or a live one",
            "pass --demo or --inventory FILE, or describe the fleet, e.g. "
            "fleet: [{name: dgx, count: 2, gpu: h100-80g, gpus: 8, fabric: ib-a}]",
        )
    from llmgw_core.planner.pools_live import planner_fleet
    from llmgw_core.serve.replicas import fleet_views

    live = await ctx.live_fleet()
    return planner_fleet(await fleet_views(live))


def _shape_summary(model: Any) -> dict[str, Any] | None:
    shape = model.any_shape
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


def run_plan(args: PlanArgs, ctx: StepContext) -> StepOutcome | Awaitable[StepOutcome]:
    """Plan the model against the fleet; exit 3 with what would help when nothing fits.

    A described fleet is planned at once, with no event loop (the runner starts
    one only for a step that returns an awaitable); a live one once it answers.
    """
    if ctx.described_fleet and args.cluster is None:
        from llmgw_core.planner.pools import described_fleet

        return plan_outcome(args, ctx, described_fleet(ctx.described_fleet))
    return _plan_live(args, ctx)


async def _plan_live(args: PlanArgs, ctx: StepContext) -> StepOutcome:
    return plan_outcome(args, ctx, await fleet_for(ctx, args.cluster))


async def cluster_fleet(name: str, ctx: StepContext) -> Fleet:
    """The inventory's cluster `name` as the planner's fleet: its partition read through its
    login node (`read_cluster`, as `serve` reads it), each GRES type and count a pool.

    Raises:
        LlmgwError: no such cluster; its login node or Slurm cannot be read; no node of its
            partition has cards llmgw knows.
    """
    from llmgw_core.fleet.slurm_login import read_cluster
    from llmgw_core.planner.pools import described_fleet
    from llmgw_core.slurm.shape import described_partition

    live = await ctx.live_fleet()
    reading = await read_cluster(live.connector, live.inventory.cluster(name))
    return described_fleet(described_partition(reading.nodes))


def plan_outcome(args: PlanArgs, ctx: StepContext, fleet: Fleet) -> StepOutcome:
    """The plan of `args.model` on `fleet`, as the step's outcome."""
    from llmgw_core.catalog.resolve import origin_note
    from llmgw_core.planner.plan import plan
    from llmgw_core.serve.adapters import checked_slots
    from llmgw_core.serve.launch import default_replica_name

    model = step_model(args.model, ctx)
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
        adapters=checked_slots(
            args.adapters,
            model,
            ctx.script_dir,
            max_loras=args.max_loras,
            max_lora_rank=args.max_lora_rank,
        ),
    )
    if not result.artifacts:
        wanted = " ".join(x for x in (args.format, args.precision) if x)
        raise BadInput(
            f"{args.model} has no {wanted + ' ' if wanted else ''}files to plan",
            "drop `format:` / `precision:` to plan every file it has",
        )
    body = result.as_dict()
    body["shape"] = summary
    body["model_source"] = origin_note(model)
    body["replica_name"] = default_replica_name(model)  # what `serve` would call it
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
