"""The `explain` step: node by node, where a model would go and why every other node would not.

```yaml
steps:
  - explain: {model: catalog:meta-llama/Llama-3.3-70B-Instruct, context: 32768,
              gpu_class: h100-80g, gpus: 8, nodes: 2}
```

Each node gets one reason: class, free cards, NVLink, fabric, domain joined,
IMEX, MIG, memory, or unreachable. A replica across nodes also names the
rails it would leave out of `NCCL_IB_HCA` (`rails_left_out`: a rail whose
last fabric test between those nodes failed) and says why in `warnings`.
`inside` names, per chosen node, the path its cards should talk over by the
node's topology (`NVLink`, `PCIe P2P`, `host memory (SHM)`), which the
replica's NCCL lines later confirm or contradict (`fabric.paths`).
When the model fits nowhere the step fails with exit code 3, each node
saying how much it could hold, and the plan's advice on what would change
that. `engine_args` (with `engine:`) are the flags it would start with: the
memory ones (`kv_cache_dtype`, `flash_attn` …) size the plan, and the result
names them all.
"""

from __future__ import annotations

from typing import Any

from llmgw_core.script.registry import (
    EXIT_DOES_NOT_FIT,
    StepArgs,
    StepContext,
    StepOutcome,
    step,
)
from llmgw_core.serve.args import LayoutFields


class ExplainArgs(StepArgs, LayoutFields):
    """Arguments of `explain` (the same layout keys as `serve`)."""


async def run_explain(args: ExplainArgs, ctx: StepContext) -> StepOutcome:
    """Plan against the live fleet, then say node by node why each is or is not chosen."""
    from llmgw_core.errors import BadInput, DoesNotFit
    from llmgw_core.placement import explain, place
    from llmgw_core.planner.plan import plan
    from llmgw_core.planner.pools_live import planner_fleet
    from llmgw_core.script.steps.plan import step_model
    from llmgw_core.serve.choice import Overrides, choices
    from llmgw_core.serve.explain import capacity_verdicts
    from llmgw_core.serve.prepare import rail_choice
    from llmgw_core.serve.replicas import fleet_views

    fleet = await ctx.live_fleet()
    model = step_model(args.model, ctx)
    shape = model.any_shape
    context = args.context or (shape.max_context if shape else None)
    if context is None:
        raise BadInput(f"{args.model}: the trained context is unknown", "give `context:` in tokens")
    views = await fleet_views(fleet)
    pools = planner_fleet(views)
    from llmgw_core.engines.flags import checked_engine_args, plan_options

    flags = checked_engine_args(args.engine, args.engine_args) if args.engine_args else {}
    the_plan = plan(
        model,
        pools,
        format=args.format,
        context=context,
        concurrency=args.concurrency,
        **plan_options(args.engine, flags),
    )
    overrides = Overrides(args.engine, args.artifact, args.gpu_class, args.gpus, args.nodes)
    try:
        way = choices(the_plan, model, pools, overrides, fallbacks=0)[0]
    except DoesNotFit as exc:
        verdicts = capacity_verdicts(views, the_plan, args.gpu_class)
        result = {
            "model": args.model,
            "context": context,
            "way": None,
            "placed": False,
            "nodes": [v.as_dict() for v in verdicts],
            "advice": list(the_plan.advice),
        }
        return StepOutcome(
            result=result, ok=False, exit_code=EXIT_DOES_NOT_FIT, error=exc.sentence()
        )
    want = way.want(tuple(x for x in (model.repo_id, model.ref) if x))
    placement = place(want, views)
    result: dict[str, Any] = {
        "model": args.model,
        "context": context,
        "way": way.as_dict(),
        "placed": placement is not None,
        "placement": placement.as_dict() if placement else None,
        "nodes": [v.as_dict() for v in explain(want, views, placement)],
        "advice": list(the_plan.advice),
        "engine_args": flags,
    }
    result["inside"] = inside_expected(fleet, placement) if placement else {}
    rails = rail_choice(fleet, placement) if placement else None
    result["rails_left_out"] = [rail.as_dict() for rail in rails.left_out] if rails else []
    result["warnings"] = list(rails.warnings) if rails else []
    if args.disaggregation is not None:
        return _explain_split(args, fleet, views, the_plan, way, model, result)
    if placement is None:
        return StepOutcome(
            result=result,
            ok=False,
            exit_code=EXIT_DOES_NOT_FIT,
            error=f"no room for {way.label} now; every node says why in `nodes`",
        )
    return StepOutcome(result=result)


def _explain_split(
    args: ExplainArgs,
    fleet: Any,
    views: Any,
    the_plan: Any,
    way: Any,
    model: Any,
    result: dict[str, Any],
) -> StepOutcome:
    """A disaggregated service: both sides placed together, the KV's path, the advice."""
    from llmgw_core.errors import DoesNotFit
    from llmgw_core.serve.disagg_explain import explain_disaggregation

    try:
        split = explain_disaggregation(fleet, views, args, the_plan, way, model)
    except DoesNotFit as exc:
        result["disaggregation"] = {"placed": False}
        return StepOutcome(
            result=result, ok=False, exit_code=EXIT_DOES_NOT_FIT, error=exc.sentence()
        )
    result["disaggregation"] = split.result
    if split.refusal is not None:
        return StepOutcome(
            result=result, ok=False, exit_code=EXIT_DOES_NOT_FIT, error=split.refusal
        )
    return StepOutcome(result=result)


def _split_lines(split: dict[str, Any]) -> list[Any]:
    """A disaggregated service's lines: its sides, the KV's path, the advice and its sums."""
    from rich.text import Text

    if not split.get("placed"):
        return []
    replicas = split.get("replicas") or {}
    lines = [
        Text(
            f"prefill × {replicas.get('prefill')}, decode × {replicas.get('decode')}"
            f" ({split['engine_name']}): {split['path']}"
        )
    ]
    lines += [Text(line, style="yellow") for line in split.get("warnings") or []]
    advice = split.get("advice")
    if advice:
        lines.append(Text(advice["verdict"], style="green" if advice["pays"] else "yellow"))
        lines += [Text(f"  {line}") for line in advice["arithmetic"]]
    elif split.get("advice_needs"):
        lines.append(Text(split["advice_needs"]))
    return lines


def inside_expected(fleet: Any, placement: Any) -> dict[str, str]:
    """Per placed node, the path its cards should talk over by its topology (`NVLink`)."""
    from llmgw_core.fabric.paths import expected_inside
    from llmgw_core.serve.transport import node_topology

    nodes = {placed.node: placed.gpu_ids for placed in placement.nodes}
    topology = node_topology(fleet.snapshot(), nodes)
    said: dict[str, str] = {}
    for node, gpu_ids in nodes.items():
        cards = [int(g) for g in gpu_ids if g.isdigit()]
        expected = expected_inside(topology.get(node), cards) if len(cards) > 1 else None
        if expected:
            said[node] = expected
    return said


def render_explain(result: dict[str, Any]) -> Any:
    """The way, then one row per node: chosen or why not."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    way = result.get("way")
    head = Text(f"{result['model']}: " + (way["label"] if way else "fits nowhere"))
    if result.get("engine_args"):
        from llmgw_core.engines.flags import shown_flags

        head.append(f" · engine flags {shown_flags(result['engine_args'])}")
    table = Table("node", "", "why", box=None)
    inside = result.get("inside") or {}
    for node in result.get("nodes", []):
        reason = node["reason"]
        if node["node"] in inside:
            reason = f"{reason}; its cards talk over {inside[node['node']]}"
        table.add_row(node["node"], "✓" if node["chosen"] else "✗", reason)
    advice = [Text(f"• {line}") for line in result.get("advice", [])]
    warnings = [Text(line, style="yellow") for line in result.get("warnings") or []]
    split = _split_lines(result["disaggregation"]) if result.get("disaggregation") else []
    return Group(head, table, *warnings, *split, *advice)


step("explain", args=ExplainArgs, render=render_explain)(run_explain)
