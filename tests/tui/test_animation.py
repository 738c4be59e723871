"""Animation follows the level: a still rack at `none`, a light on the backplane at `full`."""

from __future__ import annotations

import asyncio

import pytest
from live_walk import until

from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import StaticFeed
from llmgw_tui.theme import animation_level_from_env
from llmgw_tui.widgets.rack import RackWidget


@pytest.mark.parametrize(
    ("value", "level"),
    [("none", "none"), ("BASIC", "basic"), ("full", "full"), ("sparkly", "full"), ("", "full")],
)
def test_llmgw_animation_sets_the_level_and_a_typo_falls_back(monkeypatch, value, level):
    monkeypatch.setenv("LLMGW_ANIMATION", value)
    assert animation_level_from_env() == level


def racks_after(demo_state, level: str) -> tuple[int, int]:
    """Lit backplane taps and pulsing trays after the racks have been up a while."""
    state, fabrics = demo_state

    async def run() -> tuple[int, int]:
        app = LlmgwApp(StaticFeed(state, fabrics), animation=level)  # type: ignore[arg-type]
        async with app.run_test(size=(120, 40)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.press("2")
            if level == "full":

                def a_light() -> bool:
                    return any(t.lit is not None for t in app.screen.query(RackWidget))

                await until(pilot, a_light, "a light on the backplane", 10)
            else:  # a still picture: nothing to wait for but longer than a light's step or a pulse
                await pilot.pause(1.5)
            trays = app.screen.query(RackWidget)
            lit = sum(1 for t in trays if t.lit is not None)
            pulsing = sum(len(t.pulsing()) for t in trays)
            return lit, pulsing

    return asyncio.run(run())


def test_at_none_the_rack_is_a_still_picture(demo_state):
    assert racks_after(demo_state, "none") == (0, 0)


def test_at_full_a_light_runs_down_the_backplane(demo_state):
    lit, _ = racks_after(demo_state, "full")
    assert lit == 1
