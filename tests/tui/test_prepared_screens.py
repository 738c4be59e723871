"""The other screens are built while the console is idle once the fleet is shown: a key
then only shows its screen. A prepared screen reads nothing until it is shown, and a key
pressed while its screen is still being built waits for it and shows that screen."""

from __future__ import annotations

import asyncio

from live_walk import until
from textual.widgets import Static

from llmgw_tui.app import SCREEN_MODULES, LlmgwApp
from llmgw_tui.feed import StaticFeed
from llmgw_tui.screens.fleet import FleetScreen
from llmgw_tui.screens.plan import PlanScreen
from llmgw_tui.screens.racks import ISLANDS_NAMED, islands_line

SIZE = (120, 40)


class CountingFeed(StaticFeed):
    """The demo snapshot, counting the replicas screen's reads."""

    reads = 0

    async def replicas(self, *, transports: bool = False):  # type: ignore[no-untyped-def]
        CountingFeed.reads += 1
        return await super().replicas(transports=transports)


def test_every_screen_is_built_and_laid_out_before_its_key_and_the_key_shows_that_one(demo_state):
    async def run() -> None:
        state, fabrics = demo_state
        CountingFeed.reads = 0
        app = LlmgwApp(CountingFeed(state, fabrics), animation="none")
        async with app.run_test(size=SIZE) as pilot:
            await until(
                pilot, lambda: set(SCREEN_MODULES) <= set(app._screen_stacks), "5 screens", 30
            )
            await until(pilot, lambda: not app._mounting, "the last screen mounted", 10)
            racks = app._screen_stacks["racks"][0]
            await until(pilot, lambda: not racks._layout_required, "the racks laid out", 10)
            assert app.current_mode == "fleet"
            assert isinstance(app.screen, FleetScreen)
            assert app.screen.query("#filter")  # the filter too, hidden until `/`
            assert not app.screen.query_one("#filter").display
            assert racks.is_mounted and not racks._layout_required
            assert CountingFeed.reads == 0, "the hidden replicas screen read the replicas"

            await pilot.press("2")
            assert app.screen is racks
            await pilot.press("4")
            await pilot.pause()
            assert app.screen is app._screen_stacks["replicas"][0]
            await until(pilot, lambda: CountingFeed.reads > 0, "the replicas read once shown", 10)

    asyncio.run(run())


def test_a_key_pressed_while_its_screen_is_being_built_waits_for_it_and_shows_it(make_app):
    async def run() -> None:
        app = make_app()
        app.start_preparing_screens = lambda: None  # this test prepares the plan by hand
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            preparing = asyncio.create_task(app.prepare_mode("plan"))
            await asyncio.sleep(0)  # the screen is registered, its widgets not yet in
            assert "plan" in app._mounting
            await app.run_action("open_plan('catalog:meta-llama/Llama-3.3-70B-Instruct')")
            await preparing
            screen = app.screen
            assert isinstance(screen, PlanScreen)
            assert screen is app._screen_stacks["plan"][0]

            def status() -> str:
                return str(screen.query_one("#plan-status", Static).render())

            await until(pilot, lambda: not status().startswith("Planning"), "the plan", 30)
            assert status() == (
                "meta-llama/Llama-3.3-70B-Instruct: planned for a 131072-token context"
            )

    asyncio.run(run())


def test_the_racks_screen_names_a_few_islands_and_counts_the_rest():
    few = [f"h100-{n:04d}" for n in range(5)]
    assert islands_line(few) == "Islands (no NVLink domain): " + ", ".join(few)
    assert islands_line([]) == "Islands (no NVLink domain): none"
    many = [f"h100-{n:04d}" for n in range(1500)]
    line = islands_line(many)
    assert line.startswith("Islands (no NVLink domain): h100-0000, h100-0001, ")
    assert f"h100-{ISLANDS_NAMED - 1:04d} and 1,476 more" in line
    assert f"h100-{ISLANDS_NAMED:04d}" not in line


def test_quitting_while_the_screens_are_being_prepared_closes_cleanly(make_app):
    async def run() -> tuple[set[str], bool]:
        app = make_app()
        async with app.run_test(size=SIZE) as pilot:
            # Quit as soon as the first screen after the fleet's is being built.
            await until(pilot, lambda: len(app._screen_stacks) > 1, "a screen prepared", 30)
            prepared = set(app._screen_stacks)
            await pilot.press("q")
        assert app._preparing is not None
        await asyncio.sleep(0)
        return prepared, app._preparing.done()

    prepared, stopped = asyncio.run(run())
    assert prepared < {"fleet", *SCREEN_MODULES}  # quit before every screen was prepared
    assert stopped


def test_a_preparation_that_resumes_while_the_app_closes_its_screens_builds_nothing(make_app):
    async def run() -> list[str]:
        app = make_app()
        app.start_preparing_screens = lambda: None  # this test prepares by hand
        seen: list[str] = []
        close_all = app._close_all

        async def closing() -> None:
            # Textual closes every stack by iterating over them: a screen added meanwhile
            # (a preparation resuming after its import) broke that loop.
            await app.prepare_mode("racks")
            seen.extend(app._screen_stacks)
            await close_all()

        app._close_all = closing
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await pilot.press("q")
        return seen

    assert asyncio.run(run()) == ["fleet"]
