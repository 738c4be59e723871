"""Console figures, printed (never asserted): cold start, drawing the demo fleet, refreshing 1,000 nodes.

    .venv/bin/python tests/benchmarks/bench_tui.py

1. Cold start to first frame, in a fresh interpreter, next to a minimal
   Textual app (the ratio is what the console costs on top of Textual).
2. The demo fleet (23 nodes, facts built offline) from snapshot to drawn rows.
3. A 1,000-node fleet refreshed with 10 % of its nodes changed: keyed
   `update_cell` in place, per refresh.
4. The logs screen under a stream shaped like the agent's (`{"lines": [...]}`
   batches, simulated-engine lines): lines a second drawn at each offered
   rate, with the median and worst key-press round trip (`f`, through the
   Pilot) next to the same key on an idle screen.
5. Resident memory after a million lines have been seen.
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
    from llmgw_core.views.fleet import FleetSummary, RacksSummary
    from llmgw_core.views.node import ClassCount, NodeSummary

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


ENGINE_LINE = (
    "INFO 11-29 08:00:{second:02d} [metrics.py:351] Avg prompt throughput: 0.0 tokens/s, "
    "Avg generation throughput: {n} tokens/s, Running: 4 reqs, GPU KV cache usage: 3.1%"
)


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _stream_app(rate_lines_s: float | None, total_lines: int, batch: int):
    """A console over the demo whose replica's log streams `total_lines` at `rate_lines_s`."""
    from llmgw_tui.app import LlmgwApp
    from llmgw_tui.feed import StaticFeed
    from llmgw_tui.offline_demo import demo_replica, offline_demo_state

    with tempfile.TemporaryDirectory() as root:
        state, fabrics = offline_demo_state(Path(root))
    view = demo_replica(state)

    class Streaming(StaticFeed):
        async def follow_logs(self, view, rank):
            sent = 0
            started = time.perf_counter()
            while sent < total_lines:
                lines = [
                    "[r0 h100-a-01] " + ENGINE_LINE.format(second=(sent + i) % 60, n=sent + i)
                    for i in range(batch)
                ]
                sent += batch
                yield lines
                if rate_lines_s is None:
                    await asyncio.sleep(0)
                else:
                    ahead_s = sent / rate_lines_s - (time.perf_counter() - started)
                    await asyncio.sleep(max(ahead_s, 0))

    return LlmgwApp(Streaming(state, fabrics, replicas=[view]), animation="none")


async def _key_latencies_ms(app, pilot, screen, keep_going, presses: int | None) -> list[float]:
    """Post `f` as the terminal driver does and time it until the screen's action runs."""
    from textual import events

    handled: list[float] = []
    action = screen.action_toggle_follow

    def timed_action() -> None:
        handled.append(time.perf_counter())
        action()

    screen.action_toggle_follow = timed_action
    latencies = []
    while keep_going() and (presses is None or len(latencies) < presses):
        posted = time.perf_counter()
        count = len(handled)
        app.post_message(events.Key("f", "f"))
        while len(handled) == count:
            await asyncio.sleep(0.001)
        latencies.append((handled[-1] - posted) * 1000)
        await asyncio.sleep(0.05)
    return latencies


async def _open_logs(app, pilot):
    from llmgw_tui.screens.logs import LogsScreen

    await pilot.press("colon", *"logs llama-405b", "enter")
    while not isinstance(app.screen, LogsScreen):
        await pilot.pause(0.01)
    return app.screen


async def log_stream_figures(rate_lines_s: float | None, seconds: float = 4.0) -> dict[str, float]:
    """Lines a second drawn while streaming, and key latencies (posted → handled) during it."""
    total = int((rate_lines_s or 400_000) * seconds)
    app = _stream_app(rate_lines_s, total, 100)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open_logs(app, pilot)
        started = time.perf_counter()
        keys_ms = await _key_latencies_ms(
            app,
            pilot,
            screen,
            lambda: screen.lines.seen < total and time.perf_counter() - started < seconds * 4,
            None,
        )
        while screen.lines.seen < total and time.perf_counter() - started < seconds * 4:
            await asyncio.sleep(0.01)
        # From the first line's arrival to the last's (the arrival time each line keeps).
        first_s, last_s = screen.lines.kept[0][0], screen.lines.kept[-1][0]
        kept = len(screen.lines.kept)
        return {
            "lines_s": kept / max(last_s - first_s, 1e-6),
            "key_median_ms": statistics.median(keys_ms),
            "key_worst_ms": max(keys_ms),
        }


async def idle_key_ms() -> float:
    """The same key's latency on a logs screen with nothing streaming."""
    app = _stream_app(None, 0, 100)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open_logs(app, pilot)
        return statistics.median(await _key_latencies_ms(app, pilot, screen, lambda: True, 20))


async def million_lines_rss_mib() -> tuple[float, float, float]:
    """RSS before, after a million lines seen, and the seconds it took (as fast as it goes)."""
    from llmgw_tui.screens.logs import LogsScreen

    app = _stream_app(None, 1_000_000, 500)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("colon", *"logs llama-405b", "enter")
        while not isinstance(app.screen, LogsScreen):
            await pilot.pause(0.01)
        before = _rss_mib()
        started = time.perf_counter()
        while app.screen.lines.seen < 1_000_000:
            await pilot.pause(0.1)
        return before, _rss_mib(), time.perf_counter() - started


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
    print(f"logs, idle: key latency {asyncio.run(idle_key_ms()):.0f} ms (median)")
    for rate in (10_000, 50_000, 100_000, 200_000, None):
        figures = asyncio.run(log_stream_figures(rate))
        offered = f"{rate:,} lines/s offered" if rate else "as fast as offered"
        print(
            f"logs, {offered}: {figures['lines_s']:,.0f} lines/s drawn, key latency "
            f"median {figures['key_median_ms']:.0f} ms, worst {figures['key_worst_ms']:.0f} ms"
        )
    before, after, took_s = asyncio.run(million_lines_rss_mib())
    print(
        f"logs, a million lines seen in {took_s:.1f} s: RSS {before:.0f} MiB before, "
        f"{after:.0f} MiB after (200,000 kept, 50,000 in the view)"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["logs"]:
        print(f"logs, idle: key latency {asyncio.run(idle_key_ms()):.0f} ms (median)")
        for rate in (10_000, 50_000, 100_000, 200_000, None):
            figures = asyncio.run(log_stream_figures(rate))
            print(rate, figures)
        print(asyncio.run(million_lines_rss_mib()))
    else:
        main()
