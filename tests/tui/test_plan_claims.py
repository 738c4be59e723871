"""The plan screen never offers cards another console's replica holds (issue 35).

Two consoles on one fleet, as two operators run them: an embedded demo fleet
of two nodes (h100-a-01, eight H100s on ib-a, and l40s-01; real SSH to
loopback agents, simulated engines) reached through its inventory by two
`LlmgwApp`s, each with a `LiveFeed` of its own. The second plans a model that
fits one H100 and is offered the H100s, free; the first serves a replica on all
eight (the `serve` step, as its wizard and the runner start one, over the first
console's own open fleet), so the agent on h100-a-01 claims every card; the
second plans again (ctrl+r) and now lists every H100 way busy and picks the
L40S. The claims, read fresh from the agents when the plan is made, are the
difference: the second console's own poll never saw the other's serve start.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from live_walk import console_on, demo_part, ready_nodes, screen_after, until
from serve_demo_harness import FleetContext, step
from textual.widgets import DataTable, Static

from llmgw_agent.ops import Op
from llmgw_tui.screens.plan import WAY_COLUMNS, PlanScreen

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"
HELD = "h100-a-01"
"""The node whose eight cards the first console's replica takes (the fleet's only H100s)."""
HELD_CLASS = "h100-80g"
HELD_WHERE = "ib-a"
"""Where the plan screen says an H100 way runs: the fabric the inventory puts h100-a-01 on."""
OTHER = "l40s-01"
REPLICA = "held-8b"
SIZE = (140, 48)


def test_a_plan_in_one_console_offers_no_card_the_other_consoles_replica_holds(tmp_path: Path):
    asyncio.run(_two_consoles(tmp_path))


async def _two_consoles(tmp_path: Path) -> None:
    async with demo_part(tmp_path / "demo", (HELD, OTHER)) as demo:
        await _holding_and_planning(demo, tmp_path)


async def _holding_and_planning(demo: Any, tmp_path: Path) -> None:
    holder, holder_feed = console_on(demo)
    planner, _feed = console_on(demo)
    async with holder.run_test(size=SIZE) as holding, planner.run_test(size=SIZE) as pilot:
        await until(holding, lambda: ready_nodes(holder) == 2, "the first console's fleet", 60)
        await until(pilot, lambda: ready_nodes(planner) == 2, "the second console's fleet", 60)

        screen = await screen_after(pilot, planner, "3", PlanScreen, "the plan screen")
        await pilot.press(*MODEL, "enter")
        before = await _planned(pilot, screen)
        held_before = [way for way in before if HELD_CLASS in way["WAY"]]
        assert held_before and all(way["WHERE"] == HELD_WHERE for way in held_before)
        assert all(way["NOW"] == "free" for way in before), before
        assert _best(screen).startswith(f"Best: original on 1 × {HELD_CLASS} ")

        # The first console serves on every card of h100-a-01, over its own fleet.
        first = FleetContext(holder_feed._live(), tmp_path)
        served = await step(
            first,
            "serve",
            model=MODEL,
            name=REPLICA,
            context=8192,
            gpu_class=HELD_CLASS,
            gpus=8,
        )
        assert served.error is None, served
        answer = await holder_feed._live().request(HELD, Op.CLAIMS)
        held = {str(c["gpu"]) for c in answer["claims"] if c.get("replica") == REPLICA}
        assert len(held) == 8, answer

        await pilot.press("ctrl+r")  # Plan again
        after = await _planned(pilot, screen)
        free = [way for way in after if way["NOW"] == "free"]
        assert free, after
        for way in free:  # nothing offered free is on the cards the first console holds
            assert HELD_CLASS not in way["WAY"] and way["WHERE"] == OTHER, way
        held_after = [way for way in after if HELD_CLASS in way["WAY"]]
        assert {(w["FILE"], w["WAY"], w["HOW"]) for w in held_after} == {
            (w["FILE"], w["WAY"], w["HOW"]) for w in held_before
        }
        assert all(way["NOW"] == "busy" for way in held_after), after
        assert _best(screen).startswith("Best: original on 1 × l40s-48g ")

        await step(first, "stop", replica=REPLICA)
        await first.close()


async def _planned(pilot, screen: PlanScreen) -> list[dict[str, str]]:
    """The ways the plan screen lists once its plan is laid out, one dict a row by column."""

    status = screen.query_one("#plan-status", Static)

    def done() -> bool:
        planning = any(w.group == "plan" and not w.is_finished for w in screen.workers)
        return not planning and not str(status.content).startswith("Planning")

    await until(pilot, done, "the plan", 60)
    said = str(status.content)
    assert said.startswith("meta-llama/Llama-3.1-8B-Instruct: planned for a "), said
    table = screen.query_one("#plan-ways", DataTable)
    rows = [table.get_row_at(index) for index in range(table.row_count)]
    return [dict(zip(WAY_COLUMNS, map(str, row), strict=True)) for row in rows]


def _best(screen: PlanScreen) -> str:
    return str(screen.query_one("#plan-best", Static).content)
