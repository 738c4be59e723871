"""The `doctor` step: every node's own checks, run by its agent.

For people, a line per node and each check that did not pass; `--json` has
every check.

    - doctor: {}                       # every node
    - doctor: {nodes: [h100-a-01]}     # some of them

The step fails (exit 1) when a check fails on any node, or a node asked for
cannot be reached — as `llmgw doctor` does on one node.
"""

from __future__ import annotations

import asyncio
from typing import Any

from llmgw_agent.ops import Op
from llmgw_core.errors import LlmgwError
from llmgw_core.script.registry import (
    EXIT_STEP_FAILED,
    StepArgs,
    StepContext,
    StepOutcome,
    step,
)
from llmgw_core.script.steps.nodes import few_names

DOCTOR_TIMEOUT_S = 120.0
STATUSES = ("pass", "warn", "fail")


class DoctorArgs(StepArgs):
    """Arguments of `doctor`.

    Attributes:
        nodes: the nodes to check (all of them when absent).
    """

    nodes: list[str] | None = None


def checks_of(raw: Any) -> list[dict[str, Any]]:
    """The checks of an agent's `doctor` answer: `check`, `status`, `message`, `fix` each.

    Raises:
        LlmgwError: the answer holds no list of checks.
    """
    checks = raw.get("checks") if isinstance(raw, dict) else None
    if not isinstance(checks, list):
        raise LlmgwError("the agent's doctor answer has no list of checks")
    return [
        {
            "check": str(item.get("check", "?")),
            "status": str(item.get("status", "fail")),
            "message": str(item.get("message", "")),
            "fix": str(item.get("fix") or ""),
        }
        for item in checks
        if isinstance(item, dict)
    ]


def render_doctor(result: dict[str, Any]) -> Any:
    """One summary row per node, then each check that did not pass (JSON has them all)."""
    from rich.table import Table

    table = Table(title="doctor", title_justify="left")
    for column in ("node", "check", "status", "message", "fix"):
        table.add_column(column)
    colours = {"pass": "green", "warn": "yellow", "fail": "red"}
    for node in result["nodes"]:
        if node["error"]:
            table.add_row(node["name"], "-", "[red]fail[/red]", node["error"], "")
            continue
        counts = node["counts"]
        summary = ", ".join(f"{counts[status]} {status}" for status in STATUSES if counts[status])
        worst = next((s for s in ("fail", "warn") if counts[s]), "pass")
        colour = colours[worst]
        table.add_row(
            node["name"], "all", f"[{colour}]{worst}[/{colour}]", summary or "no checks", ""
        )
        for check in node["checks"]:
            if check["status"] == "pass":
                continue
            colour = colours.get(check["status"], "red")
            table.add_row(
                "",
                check["check"],
                f"[{colour}]{check['status']}[/{colour}]",
                check["message"],
                check["fix"],
            )
    return table


@step("doctor", args=DoctorArgs, render=render_doctor)
async def run_doctor(args: DoctorArgs, ctx: StepContext) -> StepOutcome:
    """Run the agent's doctor on every node asked for."""
    fleet = await ctx.live_fleet()
    snapshot = fleet.snapshot()
    names = args.nodes if args.nodes is not None else list(snapshot.nodes)
    unknown = [name for name in names if name not in snapshot.nodes]
    if unknown:
        raise LlmgwError(
            f"no node is named {unknown[0]!r}", f"the nodes are {', '.join(snapshot.nodes)}"
        )

    async def examine(name: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": name, "checks": [], "error": None}
        try:
            raw = await fleet.request(name, Op.DOCTOR, timeout_s=DOCTOR_TIMEOUT_S)
            entry["checks"] = checks_of(raw)
        except LlmgwError as exc:
            entry["error"] = exc.sentence()
        entry["counts"] = {
            status: sum(1 for check in entry["checks"] if check["status"] == status)
            for status in STATUSES
        }
        return entry

    nodes = await asyncio.gather(*(examine(name) for name in names))
    failing = [node["name"] for node in nodes if node["error"] or node["counts"]["fail"]]
    result = {"nodes": nodes}
    if failing:
        return StepOutcome(
            result=result,
            ok=False,
            exit_code=EXIT_STEP_FAILED,
            error=f"checks fail on {len(failing)} node(s): {few_names(failing)}",
        )
    return StepOutcome(result=result)
