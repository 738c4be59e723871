"""The `nodes` step: the live fleet, one row per node.

- nodes: {}                  # list every node as it is now
- nodes: {all_ready: true}   # and fail (exit 1) unless every node is ready
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmgw_core.devices import domain_name
from llmgw_core.fleet.state import FleetState, NodeState
from llmgw_core.inventory import NodeSpec
from llmgw_core.script.registry import (
    EXIT_STEP_FAILED,
    StepArgs,
    StepContext,
    StepOutcome,
    step,
)


class NodesArgs(StepArgs):
    """Arguments of `nodes`.

    Attributes:
        all_ready: fail the step when any node is not ready.
    """

    all_ready: bool = False


def few_names(names: Sequence[str], most: int = 5) -> str:
    """The first `most` names, and how many more there are: `a, b, c, d, e and 3 more`."""
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def node_row(node: NodeState, spec: NodeSpec | None) -> dict[str, Any]:
    """One node as the step reports it (the same dict for tables and JSON)."""
    facts = node.facts
    classes = sorted({gpu.gpu_class for gpu in facts.gpus}) if facts else []
    domain = facts.nvlink_domain if facts else None
    return {
        "name": node.name,
        "state": node.state,
        "reason": node.reason,
        "gpus": len(facts.gpus) if facts else 0,
        "classes": classes,
        "fabrics": [fabric.name for fabric in spec.fabrics] if spec else [],
        "nvlink_domain": (
            {"cluster_uuid": domain.cluster_uuid, "clique_id": domain.clique_id} if domain else None
        ),
        "agent_version": node.agent_version,
    }


def nodes_result(snapshot: FleetState, specs: dict[str, NodeSpec]) -> dict[str, Any]:
    """The step's result: every node's row and the count per state."""
    return {
        "taken_at": snapshot.taken_at.isoformat(),
        "counts": snapshot.counts(),
        "nodes": [node_row(node, specs.get(name)) for name, node in snapshot.nodes.items()],
    }


def render_nodes(result: dict[str, Any]) -> Any:
    """The rows as a Rich table; the reason of each node not ready under it."""
    from rich import box
    from rich.table import Table

    counts = ", ".join(f"{count} {state}" for state, count in sorted(result["counts"].items()))
    table = Table(
        title=f"nodes ({counts})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for column in ("name", "state", "gpus", "classes", "fabrics", "nvlink domain", "agent"):
        table.add_column(
            column,
            justify="right" if column == "gpus" else "left",
            no_wrap=column in ("name", "gpus", "nvlink domain", "agent"),
            overflow="fold",
            min_width=20 if column == "classes" else None,
        )
    for row in result["nodes"]:
        shown_domain = domain_name(row["nvlink_domain"]) or "-"
        state = row["state"] + ("*" if row["reason"] else "")
        table.add_row(
            row["name"],
            state,
            str(row["gpus"]),
            "\n".join(row["classes"]) or "-",
            ", ".join(row["fabrics"]) or "-",
            shown_domain,
            row["agent_version"] or "-",
        )
    reasons = [f"* {row['name']}: {row['reason']}" for row in result["nodes"] if row["reason"]]
    if not reasons:
        return table
    from rich.console import Group
    from rich.text import Text

    return Group(table, *(Text(reason) for reason in reasons))


@step("nodes", args=NodesArgs, render=render_nodes)
async def run_nodes(args: NodesArgs, ctx: StepContext) -> StepOutcome:
    """List the live fleet."""
    fleet = await ctx.live_fleet()
    snapshot = fleet.snapshot()
    specs = {spec.name: spec for spec in fleet.inventory.node_specs()}
    result = nodes_result(snapshot, specs)
    if args.all_ready:
        waiting = [node.name for node in snapshot.nodes.values() if node.state != "ready"]
        if waiting:
            return StepOutcome(
                result=result,
                ok=False,
                exit_code=EXIT_STEP_FAILED,
                error=f"{len(waiting)} node(s) are not ready: {few_names(waiting)}",
            )
    return StepOutcome(result=result)
