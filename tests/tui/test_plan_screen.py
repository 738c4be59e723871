"""The plan screen: the planner's answer for a model on the demo fleet, edited by keyboard."""

from __future__ import annotations

import asyncio

from textual.widgets import DataTable, Input, Static

from llmgw_tui.screens.plan import PlanScreen

SIZE = (120, 40)


def run(make_app, scenario) -> None:
    async def go() -> None:
        app = make_app()
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            await scenario(app, pilot)

    asyncio.run(go())


async def planned(app, pilot) -> str:
    await app.workers.wait_for_complete()
    await pilot.pause()
    return str(app.screen.query_one("#plan-status", Static).render())


def test_plan_command_plans_the_model_on_this_fleet_and_names_the_best_way(make_app):
    async def scenario(app, pilot) -> None:
        await pilot.press("colon", *"plan catalog:meta-llama/Llama-3.3-70B-Instruct", "enter")
        status = await planned(app, pilot)
        assert isinstance(app.screen, PlanScreen)
        assert status == "meta-llama/Llama-3.3-70B-Instruct: planned for a 131072-token context"
        best = str(app.screen.query_one("#plan-best", Static).render())
        assert best.startswith("Best: original on 2 × gb200-186g (vLLM TP2): ")
        assert app.screen.query_one("#plan-ways", DataTable).row_count > 1

    run(make_app, scenario)


def test_a_shorter_context_typed_in_replans_on_fewer_cards(make_app):
    async def scenario(app, pilot) -> None:
        await app.run_action("open_plan('catalog:meta-llama/Llama-3.3-70B-Instruct')")
        await planned(app, pilot)
        context = app.screen.query_one("#plan-context", Input)
        context.value = ""
        context.focus()
        await pilot.press(*"8192", "enter")
        status = await planned(app, pilot)
        assert status.endswith("planned for a 8192-token context")
        best = str(app.screen.query_one("#plan-best", Static).render())
        assert best.startswith("Best: original on 1 × gb200-186g (vLLM TP1): ")

    run(make_app, scenario)


def test_an_unknown_model_is_a_red_line_on_the_plan_screen(make_app):
    async def scenario(app, pilot) -> None:
        await app.run_action("open_plan('catalog:nobody/nothing-7B')")
        status = await planned(app, pilot)
        line = app.screen.query_one("#plan-status", Static)
        assert line.has_class("-error")
        assert "nobody/nothing-7B" in status

    run(make_app, scenario)
