"""Console figures, printed (never asserted): cold start, drawing the demo fleet, refreshing 1,000 nodes.

    .venv/bin/python tests/benchmarks/bench_tui.py

1. Cold start to first frame, in a fresh interpreter, next to a minimal
   Textual app (the ratio is what the console costs on top of Textual).
2. The demo fleet (23 nodes, facts built offline) from snapshot to drawn rows.
3. A 1,000-node fleet refreshed with 10 % of its nodes changed: keyed
   `update_cell` in place, per refresh.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MINIMAL = """
import sys, time
t0 = float(sys.argv[1])
from textual.app import App
from textual.widgets import Static
class Minimal(App):
    def compose(self):
        yield Static("hello")
async def first_frame(pilot):
    await pilot.pause()
    print(time.time() - t0)
    pilot.app.exit()
Minimal().run(headless=True, size=(120, 40), auto_pilot=first_frame)
"""

CONSOLE = """
import asyncio, sys, time
t0 = float(sys.argv[1])
from llmgw_tui.app import LlmgwApp
class Connecting:
    refresh_s = None
    async def snapshot(self):
        await asyncio.Event().wait()   # the fleet is still connecting: the first frame must not wait
    async def close(self):
        pass
async def first_frame(pilot):
    await pilot.pause()
    print(time.time() - t0)
    pilot.app.exit()
LlmgwApp(Connecting(), animation="none").run(headless=True, size=(120, 40), auto_pilot=first_frame)
"""


def cold_start_s(code: str, runs: int = 5) -> float:
    """The median seconds from spawning an interpreter to its app's first frame."""
    times = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", code, repr(time.time())],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        )
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


async def demo_fleet_drawn_s() -> float:
    """Seconds from a ready demo snapshot to the fleet table holding every row."""
    from textual.widgets import DataTable

    from llmgw_tui.app import LlmgwApp
    from llmgw_tui.feed import StaticFeed
    from llmgw_tui.offline_demo import offline_demo_state

    with tempfile.TemporaryDirectory() as root:
        state, fabrics = offline_demo_state(Path(root))
    feed = StaticFeed(state, fabrics)
    app = LlmgwApp(feed, animation="none")
    async with app.run_test(size=(120, 40)) as pilot:
        start = time.perf_counter()
        table = app.screen.query_one("#nodes", DataTable)
        while table.row_count < len(state.nodes):
            await pilot.pause(0.001)
        await pilot.pause()
        return time.perf_counter() - start


def big_fleet(nodes: int, changed_every: int, generation: int):
    """A fleet summary of `nodes` H100 nodes; every `changed_every`-th node's free cards vary."""
    from llmgw_core.views import ClassCount, FleetSummary, NodeSummary, RacksSummary

    rows = []
    for i in range(nodes):
        free = 8 - ((generation + i) % 9) if i % changed_every == 0 else 8
        rows.append(
            NodeSummary(
                name=f"node-{i:04d}",
                state="ready",
                reason=None,
                classes=(ClassCount("h100-80g", max(free, 0), 8),),
                fabrics=("ib-a",),
                nvlink_domain=None,
                running_shards=0,
                cpu_only=False,
            )
        )
    return FleetSummary(nodes=tuple(rows), details={}, racks=RacksSummary((), ()))


async def big_fleet_refresh_ms(nodes: int = 1000, rounds: int = 10) -> float:
    """Median milliseconds to apply one refresh of a big fleet (10 % of rows changed)."""
    from textual.widgets import DataTable

    from llmgw_tui.app import LlmgwApp
    from llmgw_tui.feed import StaticFeed

    class Fixed(StaticFeed):
        def __init__(self, summary):
            self.refresh_s = None
            self._summary = summary

    app = LlmgwApp(Fixed(big_fleet(nodes, 10, 0)), animation="none")
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.screen.query_one("#nodes", DataTable)
        while table.row_count < nodes:
            await pilot.pause(0.001)
        screen = app.screen
        times = []
        for generation in range(1, rounds + 1):
            summary = big_fleet(nodes, 10, generation)
            start = time.perf_counter()
            screen.show_fleet(summary)
            await pilot.pause()
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)


def main() -> None:
    """Print every figure."""
    minimal = cold_start_s(MINIMAL)
    console = cold_start_s(CONSOLE)
    print(f"cold start to first frame: minimal Textual app {minimal * 1000:.0f} ms")
    print(f"cold start to first frame: llmgw console       {console * 1000:.0f} ms")
    print(f"ratio console / minimal: {console / minimal:.2f}")
    print(
        f"demo fleet (23 nodes) snapshot to drawn rows: {asyncio.run(demo_fleet_drawn_s()) * 1000:.0f} ms"
    )
    print(
        f"1,000-node fleet, 10 % of rows changed: {asyncio.run(big_fleet_refresh_ms()):.0f} ms a refresh"
    )


if __name__ == "__main__":
    main()
