"""The `metrics` step: serve the fleet's Prometheus metrics until interrupted.

    - metrics: {port: 9464}
    - metrics: {port: 9464, host: 0.0.0.0, interval_s: 10}
    - metrics: {port: 9464, gateways: [{name: gw, node: h100-a-01, port: 29000}]}

Every `interval_s` it gathers a snapshot (nodes, cards, replicas, the last
`fabric-test` of the script, each gateway's own metrics through SSH) and
scrapes answer from the latest one at once. Ctrl-C or SIGTERM ends it
cleanly (exit 0); `for_s` bounds it (for tests and one-off captures).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from typing import Any

from pydantic import Field

from llmgw_core.cancelling import cancel_and_wait
from llmgw_core.errors import BadInput
from llmgw_core.metrics import DEFAULT_HOST
from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class GatewayArg(StepArgs):
    """A gateway to scrape: its name (the `gateway` label), node and metrics port there."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    node: str = Field(min_length=1)
    port: int = Field(ge=1, le=65535)
    path: str = Field(default="/metrics", pattern=r"^/[A-Za-z0-9_./-]*$")


class MetricsArgs(StepArgs):
    """Arguments of `metrics`.

    Attributes:
        port: where Prometheus scrapes (0: any free port, said when it starts).
        host: the address to bind (127.0.0.1 unless the scraper is elsewhere).
        interval_s: how often the snapshot is gathered anew.
        for_s: stop after this long (default: serve until interrupted).
        gateways: gateways' metrics ports to scrape and re-export beside those found.
        refresh_facts: re-read every node's facts each interval (card memory and
            utilisation); off, the facts are those read when the fleet connected.
    """

    port: int = Field(ge=0, le=65535)
    host: str = Field(default=DEFAULT_HOST, min_length=1)
    interval_s: float = Field(default=15.0, gt=0, le=3600)
    for_s: float | None = Field(default=None, gt=0)
    gateways: list[GatewayArg] = Field(default_factory=list)
    refresh_facts: bool = True


def _targets(args: MetricsArgs, inventory: Any) -> list[Any]:
    from llmgw_core.metrics.gateway import GatewayTarget

    known = [spec.name for spec in inventory.node_specs()]
    for gateway in args.gateways:
        if gateway.node not in known:
            raise BadInput(
                f"gateway {gateway.name} is on {gateway.node!r}, which is not in the inventory",
                f"the nodes are {', '.join(known)}",
            )
    return [GatewayTarget(g.name, g.node, g.port, g.path) for g in args.gateways]


def _stop_on_signals(stop: asyncio.Event) -> Callable[[], None]:
    """Make Ctrl-C and SIGTERM set `stop`; returns what undoes it.

    Off the main thread (a test's loop) signals cannot be caught; `for_s` bounds the step there.
    """
    loop = asyncio.get_running_loop()
    caught = []
    for signum in STOP_SIGNALS:
        try:
            loop.add_signal_handler(signum, stop.set)
        except (RuntimeError, NotImplementedError, ValueError):
            continue
        caught.append(signum)

    def restore() -> None:
        for signum in caught:
            loop.remove_signal_handler(signum)

    return restore


async def _unless_stopped(stop: asyncio.Event, work: Any, timeout_s: float | None) -> Any:
    """`work`'s result, or None when `stop` is set (or `timeout_s` passes) first."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, stopped}, timeout=timeout_s, return_when="FIRST_COMPLETED")
    stopped.cancel()
    if task in done:
        return task.result()
    await cancel_and_wait(task)
    return None


def render_metrics(result: dict[str, Any]) -> Any:
    """One line: where it served, how often it refreshed, why it stopped."""
    from rich.text import Text

    why = "interrupted" if result["interrupted"] else f"after {result['for_s']:g} s"
    lines = [f"metrics served at {result['url']}: {result['refreshes']} snapshots, stopped {why}"]
    lines += [f"  {name}: {sentence}" for name, sentence in result["gateways_unread"].items()]
    return Text("\n".join(lines))


@step("metrics", args=MetricsArgs, render=render_metrics)
async def run_metrics(args: MetricsArgs, ctx: StepContext) -> StepOutcome:
    """Serve Prometheus metrics of the fleet until interrupted (or for `for_s`)."""
    from llmgw_core.metrics.exporter import SnapshotCollector, serve_metrics
    from llmgw_core.metrics.sources import gather_snapshot
    from llmgw_core.serve.http import EngineReach, close_quietly

    fleet = await ctx.live_fleet()
    targets = _targets(args, fleet.inventory)
    collector = SnapshotCollector()
    server = serve_metrics(collector, args.port, args.host)
    print(f"llmgw: metrics at {server.url} (Ctrl-C stops)", file=sys.stderr, flush=True)
    loop = asyncio.get_running_loop()
    deadline = None if args.for_s is None else loop.time() + args.for_s
    reach = EngineReach(fleet)
    stop = asyncio.Event()
    restore = _stop_on_signals(stop)
    refreshes = 0
    unread: dict[str, str] = {}
    try:
        while not stop.is_set():
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                break
            gathered = await _unless_stopped(
                stop,
                gather_snapshot(
                    fleet,
                    reach,
                    gateways=targets,
                    refresh_facts=args.refresh_facts,
                ),
                left,
            )
            if gathered is not None:
                snapshot, unread = gathered
                collector.update(snapshot)
                refreshes += 1
            left = None if deadline is None else deadline - loop.time()
            wait = args.interval_s if left is None else max(0.0, min(args.interval_s, left))
            await _unless_stopped(stop, asyncio.sleep(wait), None)
    finally:
        restore()
        server.stop()
        await close_quietly(reach)
    return StepOutcome(
        result={
            "url": server.url,
            "refreshes": refreshes,
            "interrupted": stop.is_set(),
            "for_s": args.for_s,
            "gateways_unread": unread,
        }
    )
