"""The fleet screen over a big fleet: a poll redraws what changed, the filter waits for a pause in
typing, and a poll's summary is computed off the UI loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from rich.text import Text
from textual.widgets import DataTable

from llmgw_core.fleet.state import FleetState, NodeState
from llmgw_core.views.fleet import FleetSummary, RacksSummary, SummaryCache, fleet_summary
from llmgw_core.views.node import ClassCount, NodeSummary
from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import StaticFeed, summary_off_loop
from llmgw_tui.screens import fleet as fleet_screen
from llmgw_tui.screens.fleet import FILTER_AFTER_TYPING_ROWS, ROWS_PER_FRAME

ROWS = FILTER_AFTER_TYPING_ROWS + 100


def fleet(free_of_node_7: int, free_of_others: int = 8) -> FleetSummary:
    nodes = tuple(
        NodeSummary(
            name=f"h100-{i:04d}",
            state="ready",
            reason=None,
            classes=(ClassCount("h100-80g", free_of_node_7 if i == 7 else free_of_others, 8),),
            fabrics=(f"ib-pod{i % 4 + 1}",),
            nvlink_domain=None,
            running_shards=0,
            cpu_only=False,
        )
        for i in range(ROWS)
    )
    return FleetSummary(nodes=nodes, details={}, racks=RacksSummary((), ()))


class Fixed(StaticFeed):
    def __init__(self, summary: FleetSummary) -> None:
        self.refresh_s = None
        self._summary = summary


def test_a_poll_of_a_big_fleet_redraws_the_changed_row_and_keeps_the_cursor():
    async def run() -> tuple[str, str, int]:
        app = LlmgwApp(Fixed(fleet(8)), animation="none")
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.screen.query_one("#nodes", DataTable)
            while table.row_count < ROWS:
                await pilot.pause(0.01)
            await pilot.press("down", "down", "down")
            before = Text.from_markup(str(table.get_cell("h100-0007", "classes"))).plain
            changed = fleet(3)
            app.fleet = changed
            app.fleet_changed.publish(changed)
            await pilot.pause()
            after = str(table.get_cell("h100-0007", "classes"))
            return before, after, table.cursor_row

    before, after, cursor = asyncio.run(run())
    assert "8/8" in before
    assert "3/8" in after
    assert cursor == 3


def test_a_filter_over_a_big_fleet_applies_once_typing_pauses(monkeypatch):
    # A pause long enough that no key of the eight, on a loaded machine, comes after it.
    monkeypatch.setattr(fleet_screen, "FILTER_PAUSE_S", 2.0)

    async def run() -> tuple[int, int]:
        app = LlmgwApp(Fixed(fleet(8)), animation="none")
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.screen.query_one("#nodes", DataTable)
            while table.row_count < ROWS:
                await pilot.pause(0.01)
            await pilot.press("slash", *"h100-000")
            while_typing = table.row_count
            for _ in range(200):  # the pause, then the rebuild
                await pilot.pause(0.05)
                if table.row_count != ROWS:
                    break
            return while_typing, table.row_count

    while_typing, after_pause = asyncio.run(run())
    assert while_typing == ROWS
    assert after_pause == 10


BIG_FLEET_NODES = 2048


def big_state(demo_state: tuple[FleetState, dict]) -> tuple[FleetState, dict[str, tuple[str, ...]]]:
    """2,048 ready nodes with the demo nodes' real facts, each under a name of its own."""
    state, fabrics = demo_state
    known = list(state.nodes.values())
    nodes: dict[str, NodeState] = {}
    big_fabrics: dict[str, tuple[str, ...]] = {}
    for i in range(BIG_FLEET_NODES):
        model = known[i % len(known)]
        name = f"{model.name}-{i:04d}"
        nodes[name] = model.model_copy(update={"name": name})
        big_fabrics[name] = tuple(fabrics.get(model.name, ()))
    return state.model_copy(update={"nodes": nodes}), big_fabrics


@pytest.mark.slow
def test_the_summary_of_2048_changed_nodes_leaves_the_ui_loop_free_to_tick(demo_state):
    state, fabrics = big_state(demo_state)

    async def ticks_while(work: Callable[[], Awaitable[FleetSummary]]) -> tuple[int, FleetSummary]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                await asyncio.sleep(0.005)
                ticks += 1

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)  # the ticker is running
        before = ticks
        summary = await work()
        during = ticks - before
        done.set()
        await task
        return during, summary

    async def on_loop() -> FleetSummary:
        return fleet_summary(state, fabrics, SummaryCache())

    async def poll_path() -> FleetSummary:
        return await summary_off_loop(state, fabrics, SummaryCache(), {})

    ticks_on_loop, expected = asyncio.run(ticks_while(on_loop))
    ticks_off_loop, summary = asyncio.run(ticks_while(poll_path))
    assert ticks_on_loop == 0  # computed on the loop, nothing else runs until it is done
    assert ticks_off_loop > 0  # the poll's path: the loop kept ticking meanwhile
    assert len(summary.nodes) == BIG_FLEET_NODES
    assert summary.nodes == expected.nodes


def test_clearing_the_filter_brings_the_rows_back_a_frame_at_a_time_with_the_cursor_kept():
    assert ROWS > ROWS_PER_FRAME  # more than one frame's rows

    async def run() -> tuple[set[int], list[str], str | None]:
        app = LlmgwApp(Fixed(fleet(8)), animation="none")
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.screen.query_one("#nodes", DataTable)
            while table.row_count < ROWS:
                await pilot.pause(0.01)
            await pilot.press("slash", *"h100-0007", "enter")
            while table.row_count != 1:
                await pilot.pause(0.01)
            seen: set[int] = set()
            screen = app.screen
            schedule = screen.call_after_refresh

            def spy(callback, *args, **kwargs):
                # Each chunk hands the rest to the next frame: see how many rows are there then
                # (sampling from here alone misses them when one press outlasts every frame).
                seen.add(table.row_count)
                return schedule(callback, *args, **kwargs)

            screen.call_after_refresh = spy  # type: ignore[method-assign]
            await pilot.press("escape")
            deadline = asyncio.get_running_loop().time() + 60
            while table.row_count < ROWS:
                seen.add(table.row_count)
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0)  # every loop turn: each frame's rows are seen
            await pilot.pause()
            names = [str(key.value) for key in table.rows]
            return seen, names, app.screen.selected_node()  # type: ignore[attr-defined]

    seen, names, selected = asyncio.run(run())
    assert any(0 < count < ROWS for count in seen)  # drawn over several frames, not at once
    assert names == sorted(names) and len(names) == ROWS
    assert selected == "h100-0007"


def test_a_poll_changing_every_row_of_a_big_fleet_is_drawn_whole_over_a_few_frames():
    async def run() -> list[str]:
        app = LlmgwApp(Fixed(fleet(8)), animation="none")
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.screen.query_one("#nodes", DataTable)
            while table.row_count < ROWS:
                await pilot.pause(0.01)
            changed = fleet(3, free_of_others=5)
            app.fleet = changed
            app.fleet_changed.publish(changed)
            last = f"h100-{ROWS - 1:04d}"
            while "5/8" not in Text.from_markup(str(table.get_cell(last, "classes"))).plain:
                await pilot.pause(0.01)
            return [
                Text.from_markup(str(table.get_cell(f"h100-{i:04d}", "classes"))).plain
                for i in range(ROWS)
            ]

    cells = asyncio.run(run())
    assert "3/8" in cells[7]
    assert all("5/8" in cell for i, cell in enumerate(cells) if i != 7)
