"""The `fabric-test` step: two nodes rail by rail, or every pair of a fabric.

    - fabric-test: {nodes: [h100-a-01, h100-a-02]}
    - fabric-test: {fabric: ib-a, max_pairs: 4, duration_s: 10}

One row per pair and rail: `node_a, node_b, adapter_a, adapter_b,
rated_gbps, measured_gbps, ratio, verdict, method, reason` (and, in
`--json`, what each side printed). A pair where perftest is missing is
measured over TCP and says so (`method: tcp`, verdict `untested`). The step
fails (exit 1) when any rail fails.

Each rail's verdict is then kept on both of its nodes (`fabric.record`), so
a replica placed across them later — by this script or any console — leaves
a failed rail out of `NCCL_IB_HCA` (`fabric.rails`); `recorded` in the
result lists the nodes that keep them, `not_recorded` the ones that could
not (an older agent), with why. To serve on what passed in the same
script, give the step `on_fail: continue`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import Field, model_validator

from llmgw_agent.ops import Op
from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.fabric.rails import verdicts_to_record
from llmgw_core.fabric.run import FabricNode, RailSettings, adapter_ends, run_matrix
from llmgw_core.script.registry import (
    EXIT_STEP_FAILED,
    StepArgs,
    StepContext,
    StepOutcome,
    step,
)

VERDICT_COLOURS = {"pass": "green", "warn": "yellow", "fail": "red", "untested": "magenta"}


class FabricTestArgs(StepArgs):
    """Arguments of `fabric-test`.

    Attributes:
        nodes: two nodes (or, with `fabric`, the members of the matrix to test).
        fabric: a fabric's name: every pair of its nodes (the matrix).
        duration_s: how long each rail runs.
        size_bytes: the message size (large: small messages under-report).
        concurrent_rails: run a pair's rails together, each on its own port.
        max_pairs: how many pairs of the matrix run at once.
    """

    nodes: list[str] | None = None
    fabric: str | None = None
    duration_s: float = Field(default=5.0, gt=0, le=600)
    size_bytes: int = Field(default=8 * 1024 * 1024, ge=2, le=2**31)
    concurrent_rails: bool = False
    max_pairs: int = Field(default=4, ge=1, le=64)

    @model_validator(mode="after")
    def _what_to_test(self) -> FabricTestArgs:
        if self.fabric is None and (self.nodes is None or len(self.nodes) != 2):
            raise ValueError("give two nodes (nodes: [A, B]) or a fabric (fabric: NAME)")
        if self.nodes is not None and len(set(self.nodes)) != len(self.nodes):
            raise ValueError("a node is listed twice")
        return self


def _fabric_of(spec: Any, name: str | None) -> Any:
    for fabric in spec.fabrics:
        if name is None or fabric.name == name:
            return fabric
    return None


def _shared_fabric(specs: list[Any]) -> str | None:
    names = [{fabric.name for fabric in spec.fabrics} for spec in specs]
    shared = set.intersection(*names) if names else set()
    for fabric in specs[0].fabrics:
        if fabric.name in shared:
            return fabric.name
    return None


def _members(args: FabricTestArgs, inventory: Any) -> tuple[list[Any], str | None]:
    """The node specs to test and the fabric they are tested on."""
    specs = {spec.name: spec for spec in inventory.node_specs()}
    unknown = [name for name in args.nodes or [] if name not in specs]
    if unknown:
        raise BadInput(f"no node is named {unknown[0]!r}", f"the nodes are {', '.join(specs)}")
    if args.fabric is None:
        chosen = [specs[name] for name in args.nodes or []]
        return chosen, _shared_fabric(chosen)
    on_fabric = [spec for spec in specs.values() if _fabric_of(spec, args.fabric) is not None]
    if not on_fabric:
        fabrics = sorted({f.name for spec in specs.values() for f in spec.fabrics})
        raise BadInput(
            f"no node is on a fabric named {args.fabric!r}",
            f"the fabrics are {', '.join(fabrics)}" if fabrics else "the inventory names none",
        )
    if args.nodes is not None:
        outside = [name for name in args.nodes if _fabric_of(specs[name], args.fabric) is None]
        if outside:
            raise BadInput(f"{outside[0]} is not on fabric {args.fabric}")
        on_fabric = [specs[name] for name in args.nodes]
    if len(on_fabric) < 2:
        raise BadInput(f"fabric {args.fabric} has one node: there is no pair to test")
    return on_fabric, args.fabric


def _fabric_node(spec: Any, facts: Any, fabric_name: str | None) -> FabricNode:
    fabric = _fabric_of(spec, fabric_name) if fabric_name else None
    host = facts.get("host") if isinstance(facts, dict) else getattr(facts, "host", None)
    address = (
        host.get("mgmt_address") if isinstance(host, dict) else getattr(host, "mgmt_address", None)
    )
    return FabricNode(
        name=spec.name,
        address=address or spec.host,
        hcas=tuple(fabric.hcas) if fabric else (),
        rate_gbps=fabric.rate_gbps if fabric else None,
        adapters=adapter_ends(facts),
    )


def _note(row: dict[str, Any]) -> str:
    """The reason, where the figures alone do not say it (down, unreachable, TCP)."""
    if row["method"] == "tcp" or row["measured_gbps"] is None or row["ratio"] is None:
        return row["reason"]
    return ""


def _adapters(row: dict[str, Any]) -> str:
    a, b = row["adapter_a"], row["adapter_b"]
    if a is None and b is None:
        return "-"
    return str(a) if a == b else f"{a or '-'}/{b or '-'}"


def render_fabric_test(result: dict[str, Any]) -> Any:
    """The rails as one Rich table (a row per pair and rail), reasons beneath it."""
    from rich import box
    from rich.table import Table

    title = f"fabric test: {result['fabric']}" if result.get("fabric") else "fabric test"
    notes = [
        f"{row['node_a']}–{row['node_b']} {_adapters(row)}: {_note(row)}".replace(" -:", ":")
        for row in result["rails"]
        if _note(row)
    ]
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        caption="\n".join(notes) or None,
        caption_justify="left",
    )
    for column in ("node a", "node b", "rail"):
        table.add_column(column, no_wrap=True)
    for column in ("rated", "Gb/s", "ratio"):
        table.add_column(column, justify="right", no_wrap=True)
    for column in ("verdict", "method"):
        table.add_column(column, no_wrap=True)
    for row in result["rails"]:
        colour = VERDICT_COLOURS.get(row["verdict"], "red")
        table.add_row(
            row["node_a"],
            row["node_b"],
            _adapters(row),
            _figure(row["rated_gbps"]),
            _figure(row["measured_gbps"]),
            f"{row['ratio']:.0%}" if row["ratio"] is not None else "-",
            f"[{colour}]{row['verdict']}[/{colour}]",
            row["method"],
        )
    return table


async def keep_verdicts(fleet: Any, rows: dict[str, list[dict]]) -> tuple[list[str], dict]:
    """Record each node's verdicts on it, then re-read its facts so the next step sees them.

    Returns:
        The nodes that keep them, and `{node: why}` for those that could not.
    """

    async def record(node: str, rails: list[dict]) -> str | None:
        try:
            await fleet.request(node, Op.FABRIC_RECORD, {"rails": rails})
        except LlmgwError as exc:
            return exc.sentence()
        return None

    names = sorted(rows)
    answers = await asyncio.gather(*(record(node, rows[node]) for node in names))
    kept = [node for node, why in zip(names, answers, strict=True) if why is None]
    for node in kept:
        await fleet.refresh(node)
    return kept, {node: why for node, why in zip(names, answers, strict=True) if why}


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


@step("fabric-test", args=FabricTestArgs, render=render_fabric_test)
async def run_fabric_test(args: FabricTestArgs, ctx: StepContext) -> StepOutcome:
    """Test two nodes rail by rail, or every pair of a fabric."""
    fleet = await ctx.live_fleet()
    specs, fabric_name = _members(args, fleet.inventory)
    snapshot = fleet.snapshot()
    nodes = [
        _fabric_node(spec, snapshot.nodes[spec.name].facts or {}, fabric_name) for spec in specs
    ]
    settings = RailSettings(
        duration_s=args.duration_s,
        size_bytes=args.size_bytes,
        concurrent_rails=args.concurrent_rails,
    )
    results = await run_matrix(nodes, fleet.client, settings, max_pairs=args.max_pairs)
    recorded, not_recorded = await keep_verdicts(fleet, verdicts_to_record(results, time.time()))
    rails = [
        {**row.row(), "raw": {"server": row.raw_server, "client": row.raw_client}}
        for row in results
    ]
    counts = {
        verdict: sum(1 for row in results if row.verdict == verdict)
        for verdict in ("pass", "warn", "fail", "untested")
    }
    result = {
        "fabric": fabric_name,
        "nodes": [spec.name for spec in specs],
        "rails": rails,
        "counts": counts,
        "recorded": recorded,
        "not_recorded": not_recorded,
    }
    failing = [row for row in results if row.verdict == "fail"]
    if failing:
        first = failing[0]
        where = f"{first.node_a}–{first.node_b}" + (
            f" {first.adapter_a}" if first.adapter_a else ""
        )
        return StepOutcome(
            result=result,
            ok=False,
            exit_code=EXIT_STEP_FAILED,
            error=f"{len(failing)} rail(s) fail, first {where}: {first.reason}",
        )
    return StepOutcome(result=result)
