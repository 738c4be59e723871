"""The console marks a rail whose last fabric test failed: on the node page and the racks screen."""

from __future__ import annotations

import asyncio

from textual.widgets import DataTable, Static

from llmgw_core.facts import RailVerdict
from llmgw_tui.screens.node import NodeScreen
from llmgw_tui.screens.racks import RacksScreen

AT = 1_796_150_400.0  # 2026-12-01 18:40 UTC
FOUND = "60% of its rate with h100-a-01 at 2026-12-01 18:40 UTC"


def _with_failed_rail(state):
    nodes = dict(state.nodes)
    for node, peer in (("h100-a-01", "h100-a-02"), ("h100-a-02", "h100-a-01")):
        failed = RailVerdict(peer=peer, adapter="mlx5_5", verdict="fail", ratio=0.6, measured_at=AT)
        facts = nodes[node].facts.model_copy(update={"rail_verdicts": (failed,)})
        nodes[node] = nodes[node].model_copy(update={"facts": facts})
    return state.model_copy(update={"nodes": nodes})


def test_the_node_page_and_the_racks_screen_mark_the_failed_rail(make_app, demo_state):
    async def run() -> None:
        app = make_app(_with_failed_rail(demo_state[0]))
        async with app.run_test(size=(140, 40)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.press("colon", *"node h100-a-02", "enter")
            await pilot.pause()
            assert isinstance(app.screen, NodeScreen)
            table = app.screen.query_one("#adapters", DataTable)
            assert str(table.get_cell("mlx5_5/1", "rate")).endswith(f"✗ rail failed: {FOUND}")
            assert "rail failed" not in str(table.get_cell("mlx5_4/1", "rate"))
            await pilot.press("escape", "colon", *"racks", "enter")
            await pilot.pause()
            assert isinstance(app.screen, RacksScreen)
            line = str(app.screen.query_one("#failed-rails", Static).render())
            assert f"h100-a-02 mlx5_5: {FOUND}" in line
            assert "h100-a-01 mlx5_5: 60% of its rate with h100-a-02" in line

    asyncio.run(run())
