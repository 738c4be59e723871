"""The console alone at 2,048 nodes: key latency on the fleet and racks screens, a poll's cost, RSS.

    .venv/bin/python tests/benchmarks/bench_scale_console.py [NODES]

The fleet summary is built here (the rows of bench_scale.py's fleet: 28
NVL72 racks, H100 pods, MIG, L40S, CPU nodes, 5 % unreachable), so the
figures are the console's own, apart from SSH and the simulated nodes
(bench_scale.py measures the two together). Each poll changes 10 % of the
rows, as a refresh cycle would. Key latency is press to screen idle
(Textual's Pilot), measured while the app polls every 2 s (each poll's
summary built in a worker thread, as the live feed does). Prints figures,
asserts nothing.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from llmgw_core.views.fleet import (
    ClassCount,
    FleetSummary,
    NodeSummary,
    RacksSummary,
    RackSummary,
    TraySummary,
)

RACKS = 28
POLL_S = 2.0
TRAYS = 18


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


async def timed(pilot: Any, presses: list[str]) -> list[float]:
    latencies = []
    for key in presses:
        started = time.perf_counter()
        await pilot.press(key)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def shown(what: str, latencies: list[float]) -> None:
    p99 = (
        statistics.quantiles(latencies, n=100, method="inclusive")[98]
        if len(latencies) > 1
        else latencies[0]
    )
    print(
        f"  {what:<36} p50 {statistics.median(latencies):5.0f} ms,"
        f" p99 {p99:5.0f} ms, worst {max(latencies):5.0f} ms ({len(latencies)} keys)"
    )


async def main(total: int) -> None:
    from textual.widgets import DataTable

    from llmgw_tui.app import LlmgwApp
    from llmgw_tui.feed import StaticFeed

    class Polled(StaticFeed):
        """A new generation every poll once `polling` is on, built off the UI loop."""

        def __init__(self, first: FleetSummary) -> None:
            self.refresh_s = POLL_S
            self._summary = first
            self.polling = False
            self.polls = 0

        async def snapshot(self) -> FleetSummary:
            if self.polling:
                self.polls += 1
                self._summary = await asyncio.to_thread(summary, total, self.polls)
            return self._summary

    before = rss_mib()
    feed = Polled(summary(total, 0))
    app = LlmgwApp(feed, animation="none")
    async with app.run_test(size=(160, 50)) as pilot:
        started = time.perf_counter()
        table = app.screen.query_one("#nodes", DataTable)
        while table.row_count < total:
            await pilot.pause(0.01)
        await pilot.pause()
        print(f"fleet screen: {total} rows drawn in {time.perf_counter() - started:.2f} s")
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
        print(f"key latency (press to screen idle), polling every {POLL_S:.0f} s:")
        shown("fleet: down", await timed(pilot, ["down"] * 60))
        shown("fleet: page down", await timed(pilot, ["pagedown"] * 10))
        shown("fleet: end, home", await timed(pilot, ["end", "home"] * 3))
        shown("fleet: / then typing 'h100-01'", await timed(pilot, ["slash", *"h100-01"]))
        shown("fleet: escape (filter cleared)", await timed(pilot, ["escape"]))
        shown("fleet: down while rows come back", await timed(pilot, ["down"] * 10))
        shown("fleet: enter (node page), escape", await timed(pilot, ["enter", "escape"]))
        shown("switch to racks (2), first time", await timed(pilot, ["2"]))
        shown("racks: down, page down", await timed(pilot, ["down"] * 30 + ["pagedown"] * 5))
        shown("switch to fleet (1), racks (2) again", await timed(pilot, ["1", "2"] * 2))
        print(f"polls taken while keys were pressed: {feed.polls}")
        print(
            f"RSS: {before:.0f} MiB before the console, {rss_mib():.0f} MiB with both screens drawn"
        )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if sys.argv[1:] else 2048))
