"""The monkey: seeded random episodes over every screen of the demo console, and it survives.

20 seeds × 125 keys, in two consoles of ten seeds each (a demo fleet takes
a few seconds to start; the seeds of a console run one after the other, each
from Escape and a mode key). Seeds 0–9 run here, 10–19 in
`test_monkey_more.py`: two files, so pytest-xdist gives each its own worker. After every key the console runs, nothing
reached its guard, and no hidden widget holds the focus (`monkey.check`).

A failing seed is named with the seeds its console ran before it; replay
with `LLMGW_MONKEY_SEEDS=3,4 pytest tests/tui/test_monkey.py` (those seeds,
in that order, in one console).
"""

from __future__ import annotations

import asyncio
import os

import pytest
import textual._wait
from live_walk import ready_nodes, until
from monkey import run_monkey

from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import LiveFeed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SEEDS = 20
KEYS = 125
PER_CONSOLE = 10


def batches(first: int, last: int) -> list[list[int]]:
    """Consoles of `PER_CONSOLE` seeds from `first` to `last` (or the seeds asked for)."""
    chosen = os.environ.get("LLMGW_MONKEY_SEEDS")
    if chosen:
        seeds = [int(seed) for seed in chosen.split(",")]
        return [seeds] if first <= seeds[0] <= last else []
    return [
        list(range(start, start + PER_CONSOLE)) for start in range(first, last + 1, PER_CONSOLE)
    ]


@pytest.fixture(autouse=True)
def _quick_pilot(tmp_path, monkeypatch):
    """Pilot waits 20 ms twice per key for the app to go idle; 4 ms finds the same idle
    (a key's work is done well within it), and 4,000 keys take a minute, not four."""
    monkeypatch.setattr(textual._wait, "SLEEP_GRANULARITY", 0.004)
    monkeypatch.setattr(textual._wait, "SLEEP_IDLE", 0.0004)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)  # the logs' `w` saves where the monkey typed, relative to here


@pytest.mark.parametrize(
    "seeds", batches(0, SEEDS // 2 - 1), ids=lambda seeds: f"seeds-{seeds[0]}-{seeds[-1]}"
)
def test_the_demo_console_survives_random_keys_text_and_pastes(seeds: list[int]):
    run_batch(seeds)


def run_batch(seeds: list[int]) -> None:
    """One console of the demo fleet, the seeds one after the other in it."""

    async def run() -> None:
        app = LlmgwApp(LiveFeed(inventory=None, demo=True, refresh_s=1.0), animation="none")
        screens: set[str] = set()
        pages: set[str] = set()
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: ready_nodes(app) >= 20, "the demo fleet", 180)
            for index, seed in enumerate(seeds):
                try:
                    done = await run_monkey(app, pilot, seed, KEYS)
                except AssertionError as failure:
                    before = f" after seeds {seeds[:index]} in the same console" if index else ""
                    raise AssertionError(f"{failure}{before}") from None
                screens |= done.screens
                pages |= done.wizard_pages
        print(
            f"\nmonkey seeds {seeds}: {KEYS} keys each; {len(screens)} screens "
            f"({', '.join(sorted(screens))}); wizard pages {sorted(pages)}"
        )

    asyncio.run(run())
