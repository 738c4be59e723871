"""The console alone at 2,048 nodes: keys, screen switches, a poll's cost, RSS, first frame.

    .venv/bin/python tests/benchmarks/bench_scale_console.py [NODES] [--startup-runs N]

No SSH fleet runs: the fleet summary is built here (the rows of
bench_scale.py's fleet: 28 NVL72 racks, H100 pods, 5 % unreachable) and
handed to the console's real app and screens through a feed, exactly where
the live feed hands over the summary it computed off the loop. Everything
from that summary onward is the console's own code (app, fleet, racks and
replicas screens, widgets); SSH, the agents and the facts-to-summary step
are left out (bench_scale.py measures the whole; the summary step runs in a
worker thread there, as it does here: each poll builds a new summary with
10 % of rows changed in a thread, so its CPU competes with the keys).

Each key is timed two ways. From the press until the screen is idle
(Textual's Pilot: it waits for the screen's queued messages, then for the
process to stop using CPU, in 20 ms sleeps, so a key costs at least ~40 ms
here and more while the poll's worker thread computes; the `nothing bound`
row is that floor). And from the press to the first frame Textual composes
that shows the key's effect (`paint`: what a person sees; `Frames` says how
it is found); a key that changes nothing on screen has no paint figure. Beside the wall time, `loop cpu` is the
UI thread's own CPU time over the same span (the worker thread's excluded):
on a shared machine the steadier figure. Garbage collections during the keys
are counted. Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from llmgw_core.views.fleet import FleetSummary, RacksSummary, RackSummary, TraySummary
from llmgw_core.views.node import ClassCount, NodeSummary

RACKS = 28
POLL_S = 2.0
TRAYS = 18


KEPT: dict[str, NodeSummary] = {}
"""The rows of the previous summary: an unchanged row is the same object, as the live feed's
`SummaryCache` keeps it (only the changed rows are new objects)."""


def summary(total: int, generation: int) -> FleetSummary:
    """Rows and racks of a `total`-node fleet; one row in ten changes with `generation`."""
    rows: list[NodeSummary] = []
    racks: list[RackSummary] = []
    for rack in range(1, RACKS + 1):
        trays = []
        for tray in range(1, TRAYS + 1):
            name = f"gb200-r{rack:02d}-t{tray:02d}"
            state = "degraded" if (rack + tray) % 37 == 0 else "joined"
            trays.append(TraySummary(name, state, None, 4))  # type: ignore[arg-type]
            rows.append(node(name, len(rows), generation, "gb200-186g", 4, f"nvl72-r{rack:02d}"))
        racks.append(
            RackSummary(f"nvl72-r{rack:02d}", f"uuid-{rack}", str(rack), tuple(trays), "up")
        )
    while len(rows) < total:
        rows.append(node(f"h100-{len(rows):04d}", len(rows), generation, "h100-80g", 8, None))
    for index, row in enumerate(rows):
        kept = KEPT.get(row.name)
        if kept == row:
            rows[index] = kept
        else:
            KEPT[row.name] = row
    islands = tuple(r.name for r in rows if r.nvlink_domain is None)
    return FleetSummary(nodes=tuple(rows), details={}, racks=RacksSummary(tuple(racks), islands))


def node(name: str, index: int, generation: int, gpu: str, cards: int, domain: str | None):
    unreachable = index % 20 == 19
    free = cards - ((generation + index) % (cards + 1)) if index % 10 == generation % 10 else cards
    return NodeSummary(
        name=name,
        state="unreachable" if unreachable else "ready",
        reason="accepted the connection but sent no SSH banner within 10 s"
        if unreachable
        else None,
        classes=() if unreachable else (ClassCount(gpu, free, cards),),
        fabrics=() if domain else (f"ib-pod{index % 4 + 1}",),
        nvlink_domain=domain,
        running_shards=0,
        cpu_only=False,
    )


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Pauses:
    """Garbage-collection pauses seen while it is on, by generation: (wall ms, CPU ms of the thread)."""

    def __init__(self) -> None:
        self.on = False
        self.by_generation: dict[int, list[tuple[float, float]]] = {0: [], 1: [], 2: []}
        self._started = (0.0, 0.0)
        gc.callbacks.append(self._seen)

    def _seen(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = (time.perf_counter(), time.thread_time())
        elif self.on:
            wall_ms = (time.perf_counter() - self._started[0]) * 1000
            cpu_ms = (time.thread_time() - self._started[1]) * 1000
            self.by_generation[info["generation"]].append((wall_ms, cpu_ms))


class Frames:
    """When the console composes a frame that shows a key's effect (press to paint).

    Textual composes every frame in `Screen._compositor_refresh` and hands it to
    `App._display` (which a headless app then does not write out): the moment
    that call returns is when a terminal would get the frame. A key's effect is
    what it changes of the screen shown, the focus, the focused table's cursor
    or the focused input's text; the first frame composed once that changed is
    the key's frame.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._waiting: tuple[tuple[Any, ...], asyncio.Future[float]] | None = None
        display = app._display

        def composed(screen: Any, renderable: Any) -> None:
            display(screen, renderable)
            if self._waiting is not None and renderable is not None:
                before, seen = self._waiting
                if not seen.done() and self.looks() != before:
                    seen.set_result(time.perf_counter())

        app._display = composed

    def looks(self) -> tuple[Any, ...]:
        focused = self.app.focused
        return (
            id(self.app.screen),
            id(focused),
            getattr(focused, "cursor_coordinate", None),
            getattr(focused, "value", None),
            getattr(focused, "scroll_offset", None),
        )

    def expect(self) -> asyncio.Future[float]:
        seen: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting = (self.looks(), seen)
        return seen


FRAMES: Frames | None = None


async def timed(pilot: Any, presses: list[str]) -> list[tuple[float, float, float | None]]:
    """(wall ms, UI-thread CPU ms) from each press to the screen being idle, and press-to-paint ms."""
    assert FRAMES is not None
    latencies = []
    for key in presses:
        started, cpu = time.perf_counter(), time.thread_time()
        painted = FRAMES.expect()
        await pilot.press(key)
        idle_ms = (time.perf_counter() - started) * 1000
        cpu_ms = (time.thread_time() - cpu) * 1000
        paint_ms = (painted.result() - started) * 1000 if painted.done() else None
        latencies.append((idle_ms, cpu_ms, paint_ms))
    return latencies


def quantile(values: list[float], percent: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


def shown(what: str, latencies: list[tuple[float, float, float | None]]) -> None:
    wall = [w for w, _, _ in latencies]
    cpu = [c for _, c, _ in latencies]
    paint = [p for _, _, p in latencies if p is not None]
    painted = (
        f"{statistics.median(paint):>6.0f} {quantile(paint, 99):>6.0f} {max(paint):>6.0f}"
        if paint
        else f"{'-':>6} {'-':>6} {'-':>6}"
    )
    unpainted = len(wall) - len(paint)
    print(
        f"  {what:<38} {len(wall):>4} {statistics.median(wall):>6.0f} {quantile(wall, 95):>6.0f}"
        f" {quantile(wall, 99):>6.0f} {max(wall):>6.0f}   {statistics.median(cpu):>6.0f}"
        f" {quantile(cpu, 99):>6.0f} {max(cpu):>6.0f}   {painted}"
        + (f"  ({unpainted} drew no change)" if unpainted and paint else "")
    )


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} {five:.1f} {fifteen:.1f}"


async def main(total: int) -> None:
    from textual.widgets import DataTable

    from llmgw_tui.app import LlmgwApp
    from llmgw_tui.feed import StaticFeed

    class Polled(StaticFeed):
        """A new generation every poll once `polling` is on, built off the UI loop."""

        def __init__(self, first: FleetSummary) -> None:
            self.refresh_s = POLL_S
            self._summary = first
            self._replicas = ()
            self._logs = {}
            self._fabric_results = {}
            self.polling = False
            self.polls = 0

        async def snapshot(self) -> FleetSummary:
            if self.polling:
                self.polls += 1
                self._summary = await asyncio.to_thread(summary, total, self.polls)
            return self._summary

    print(f"{total} nodes, {RACKS} racks; {os.cpu_count()} CPUs, load average {load()} at start")
    before = rss_mib()
    feed = Polled(summary(total, 0))
    app = LlmgwApp(feed, animation="none")
    pauses = Pauses()
    global FRAMES
    async with app.run_test(size=(160, 50)) as pilot:
        FRAMES = Frames(app)
        started = time.perf_counter()
        table = app.screen.query_one("#nodes", DataTable)
        while table.row_count < total:
            await pilot.pause(0.01)
        await pilot.pause()
        print(f"fleet screen: {total} rows drawn in {time.perf_counter() - started:.2f} s")
        while app._preparing is None or not app._preparing.done():
            await pilot.pause(0.05)
        print(
            "the other screens built in the background (the filter too) by"
            f" {time.perf_counter() - started:.2f} s: their first switch shows a built screen"
        )
        screen = app.screen
        polls = []
        for generation in range(1, 6):
            fresh = summary(total, generation)
            started = time.perf_counter()
            app.fleet = fresh
            app.fleet_changed.publish(fresh)
            await pilot.pause()
            polls.append((time.perf_counter() - started) * 1000)
        print(f"a poll with 10 % of rows changed, drawn: median {statistics.median(polls):.0f} ms")
        assert screen is app.screen
        feed.polling = True
        pauses.on = True
        print(
            f"keys while the app polls every {POLL_S:.0f} s (ms; press to screen idle, the UI"
            " thread's CPU over that span, and press to the first frame showing the key's effect):"
        )
        print(
            f"  {'':<38} {'keys':>4} {'p50':>6} {'p95':>6} {'p99':>6} {'max':>6}"
            f"   {'loop cpu p50':>6} {'p99':>6} {'max':>6}   {'paint p50':>6} {'p99':>6} {'max':>6}"
        )
        shown("nothing bound (the measuring floor)", await timed(pilot, ["f9"] * 10))
        shown("fleet: down", await timed(pilot, ["down"] * 60))
        shown("fleet: page down", await timed(pilot, ["pagedown"] * 10))
        shown("fleet: end, home", await timed(pilot, ["end", "home"] * 3))
        shown("fleet: / then typing 'h100-01'", await timed(pilot, ["slash", *"h100-01"]))
        shown("fleet: escape (filter cleared)", await timed(pilot, ["escape"]))
        shown("fleet: down while rows come back", await timed(pilot, ["down"] * 10))
        shown("fleet: enter (node page), escape", await timed(pilot, ["enter", "escape"] * 2))
        shown("switch fleet -> racks, first time", await timed(pilot, ["2"]))
        shown("racks: down, page down", await timed(pilot, ["down"] * 30 + ["pagedown"] * 5))
        redraws = []
        for flip in range(4):  # a tray leaves its NVLink domain, then joins it again
            racks = app.fleet.racks
            first = racks.racks[0]
            tray = replace(first.trays[0], state="not-joined" if flip % 2 == 0 else "joined")
            changed = replace(first, trays=(tray, *first.trays[1:]))
            fresh = replace(app.fleet, racks=replace(racks, racks=(changed, *racks.racks[1:])))
            started = time.perf_counter()
            app.fleet = fresh
            app.fleet_changed.publish(fresh)
            await pilot.pause()
            redraws.append((time.perf_counter() - started) * 1000)
        print(
            f"  a poll that changes one tray, racks redrawn: median {statistics.median(redraws):.0f}"
            f" ms, worst {max(redraws):.0f} ms (to idle, {len(redraws)} polls)"
        )
        shown("switch racks -> replicas, first time", await timed(pilot, ["4"]))
        shown("switch replicas -> fleet", await timed(pilot, ["1"]))
        cycles: dict[str, list[tuple[float, float, float | None]]] = {"2": [], "4": [], "1": []}
        for _ in range(5):
            for key in ("2", "4", "1"):
                cycles[key] += await timed(pilot, [key])
        shown("switch fleet -> racks (again)", cycles["2"])
        shown("switch racks -> replicas (again)", cycles["4"])
        shown("switch replicas -> fleet (again)", cycles["1"])
        pauses.on = False
        print(f"polls taken while keys were pressed: {feed.polls}")
        for generation, seen in pauses.by_generation.items():
            if seen:
                wall, cpu = [w for w, _ in seen], [c for _, c in seen]
                print(
                    f"garbage collections of generation {generation} during the keys: {len(seen)},"
                    f" {sum(wall):.0f} ms in all (cpu {sum(cpu):.0f} ms),"
                    f" longest {max(wall):.0f} ms (cpu {max(cpu):.0f} ms)"
                )
        print(
            f"objects the collector walks in a full collection: {len(gc.get_objects()):,}"
            f" ({gc.get_freeze_count():,} more frozen)"
        )
        print(
            f"RSS: {before:.0f} MiB before the console, {rss_mib():.0f} MiB with every screen drawn"
        )
    print(f"load average {load()} at the end")


def first_frame(runs: int) -> None:
    """The console's first-frame rows of bench_startup.py."""
    from bench_startup import console_rows

    print(f"cold start to first frame, median of {runs} alternating runs (bench_startup.py):")
    print(f"{'':<38} {'ms':>8} {'ref ms':>8} {'wall':>7} {'cpu ms':>8} {'ref cpu':>8} {'cpu':>7}")
    console_rows(runs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nodes", nargs="?", type=int, default=2048)
    parser.add_argument("--startup-runs", type=int, default=5, help="0: skip the first frame")
    options = parser.parse_args()
    asyncio.run(main(options.nodes))
    if options.startup_runs:
        first_frame(options.startup_runs)
