"""2,048 simulated nodes through one bastion: discovery, memory, refresh, plan, and the console's keys.

    .venv/bin/python tests/benchmarks/bench_scale.py [NODES] [--pools P] [--bastion-limit K]

The fleet of issue 11 (28 GB200 NVL72 racks = 504 trays, HGX H100 pods on
four InfiniBand fabrics of 8 rails, A100 MIG, L40S and CPU nodes; one node
in 20 silent: it accepts TCP and never speaks SSH), reached through one
bastion. What is real and what is simulated: `llmgw_core/fleet/sim/fleet.py`
and docs/scale.md (real SSH servers, handshakes, bastion forwarding, agent
protocol and discovery code; the agents run in a few pool processes and the
node side shares this machine's CPUs with the console).

Prints, asserts nothing:
* discovery: time until every healthy node is ready, time until every node
  settled (the silent ones after `banner_timeout_s`), handshakes in flight
  at most, CPU seconds of the console and of the simulated nodes;
* the console process's memory after discovery and with the screens drawn;
* one refresh cycle: the facts of every node re-read, the shard listing the
  console's poll asks for, the summary it draws from;
* planning a 70B model over the live fleet;
* key latency (press to screen idle, Textual's Pilot) on the fleet screen
  with every row and on the racks screen with every rack, while the fleet
  is polled every 2 s as in the console.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import resource
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from llmgw_core.fleet.fleet import Fleet
from llmgw_core.fleet.sim.fleet import RACK_TRAYS, SimFleet, scale_nodes, start_sim_fleet
from llmgw_core.fleet.ssh import SshConnector
from llmgw_core.fleet.state import FleetState

BANNER_TIMEOUT_S = 10.0


def nodes_for(total: int) -> list[Any]:
    """The issue's mix at 2,048; scaled down by the same shares for a smaller run."""
    share = total / 2048
    racks = max(1, round(28 * share))
    small = max(1, round(64 * share))
    h100 = total - racks * RACK_TRAYS - 3 * small
    return scale_nodes(racks=racks, h100=h100, mig=small, l40s=small, cpu=small)


def rss_mib() -> tuple[float, float]:
    """This process's resident memory now and at its peak, MiB."""
    status = Path("/proc/self/status").read_text()
    found = {
        line.split(":")[0]: int(line.split()[1]) / 1024
        for line in status.splitlines()
        if line.startswith(("VmRSS:", "VmHWM:"))
    }
    return found["VmRSS"], found["VmHWM"]


def cpu_s(pids: list[int] | None = None) -> float:
    """CPU seconds of this process, or of the given processes."""
    if pids is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def cpu_phase(name: str, console_s: float, nodes_s: float, bastion_s: float, count: int) -> None:
    """One phase's CPU seconds: the console, the node pools, the bastion, and per node."""
    print(
        f"  CPU {name}: console {console_s:.1f} s ({console_s / count * 1000:.1f} ms a node),"
        f" node pools {nodes_s:.1f} s ({nodes_s / count * 1000:.1f} ms a node),"
        f" bastion {bastion_s:.1f} s ({bastion_s / count * 1000:.1f} ms a node)"
    )


async def discovery(sim: SimFleet) -> tuple[Fleet, SshConnector]:
    pools = [pool.pid for pool in sim.pools[:-1]]
    bastion = [sim.pools[-1].pid]
    connector = SshConnector(sim.settings)
    fleet = Fleet(sim.inventory, connector)
    silent = set(sim.silent)
    healthy = len(sim.inventory.node_specs()) - len(silent)
    before = cpu_s(), cpu_s(pools), cpu_s(bastion)
    started = time.perf_counter()
    healthy_ready_s: list[float] = []

    def note_healthy_ready(snapshot: FleetState) -> None:
        if not healthy_ready_s and all(
            n.state == "ready" for n in snapshot.nodes.values() if n.name not in silent
        ):
            healthy_ready_s.append(time.perf_counter() - started)

    fleet.add_listener(note_healthy_ready)
    await fleet.start()
    while True:
        try:
            settled = await fleet.wait_settled(30)
            break
        except TimeoutError:
            counts = fleet.snapshot().counts()
            print(f"  … {time.perf_counter() - started:.0f} s: {counts}", flush=True)
    settled_s = time.perf_counter() - started
    after = cpu_s(), cpu_s(pools), cpu_s(bastion)
    lag_s = connector.lag.lag_s()
    healthy_out = sorted(
        n.name for n in settled.nodes.values() if n.name not in silent and n.state != "ready"
    )
    stats = connector.stats
    print(f"discovery: {len(settled.nodes)} nodes, {settled.counts()}")
    print(
        f"  every node settled:           {settled_s:6.1f} s"
        f"  (the {len(silent)} silent ones after {BANNER_TIMEOUT_S:g} s)"
    )
    print(f"  healthy but not ready then:   {len(healthy_out)} of {healthy}")
    if healthy_out:
        with contextlib.suppress(TimeoutError):
            await fleet.wait_for(lambda _: bool(healthy_ready_s), timeout_s=300)
    if healthy_ready_s:
        print(f"  every healthy node ready:     {healthy_ready_s[0]:6.1f} s")
    else:
        print("  some healthy nodes were still not ready 300 s after the start")
    print(
        f"  handshakes in flight at most: {stats.peak_in_flight}"
        f" (bastion limit {sim.settings.max_handshakes_per_bastion}),"
        f" waiting for a banner at most: {stats.peak_waiting_for_banner}"
    )
    print(
        f"  console loop late in all:     {lag_s:6.1f} s (left out of the connect timeouts)"
        f" — {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    console, nodes, bastion_cpu = (a - b for a, b in zip(after, before, strict=True))
    cpu_phase("discovery", console, nodes, bastion_cpu, healthy)
    reasons = Counter(
        re.sub(r"^\S+ \([^)]*\) ", "", n.reason or "")[:90]
        for n in settled.nodes.values()
        if n.state != "ready"
    )
    print("  why nodes are not ready (count, reason without the node's name):")
    for reason, count in reasons.most_common(5):
        print(f"    {count:5d}  {reason}")
    now, peak = rss_mib()
    print(f"console RSS after discovery: {now:.0f} MiB (peak {peak:.0f} MiB)")
    return fleet, connector


async def refresh_cycle(fleet: Fleet) -> None:
    from llmgw_core.serve.replicas import reconcile
    from llmgw_core.views.fleet import fleet_summary
    from llmgw_tui.feed import inventory_fabrics

    started, cpu = time.perf_counter(), cpu_s()
    await fleet.refresh()
    print(
        f"refresh (facts of every ready node re-read): {time.perf_counter() - started:.1f} s,"
        f" console CPU {cpu_s() - cpu:.1f} s"
    )
    started = time.perf_counter()
    await reconcile(fleet)
    print(f"shard listing of every node (each console poll): {time.perf_counter() - started:.2f} s")
    fabrics = inventory_fabrics(fleet.inventory)
    times = []
    for _ in range(3):
        started = time.perf_counter()
        fleet_summary(fleet.snapshot(), fabrics)
        times.append(time.perf_counter() - started)
    print(
        f"fleet summary from a snapshot (a worker thread of the console, each poll): {min(times) * 1000:.0f} ms"
    )


def plan_over(fleet: Fleet) -> None:
    from llmgw_core.catalog import catalog_model
    from llmgw_core.planner.plan import plan
    from llmgw_core.planner.pools_live import live_nodes, planner_fleet

    model = catalog_model("catalog:meta-llama/Llama-3.3-70B-Instruct")
    started = time.perf_counter()
    pools = planner_fleet(live_nodes(fleet.snapshot(), fleet.inventory.node_specs()))
    built_s = time.perf_counter() - started
    result = plan(model, pools, context=32768)
    plan_s = time.perf_counter() - started - built_s
    best = result.best.label() if result.best else "none"
    print(
        f"plan Llama-3.3-70B over the live fleet: views {built_s * 1000:.0f} ms,"
        f" plan {plan_s * 1000:.0f} ms, {len(result.options)} ways; best: {best}"
    )


async def keys(pilot: Any, presses: list[str]) -> list[float]:
    latencies = []
    for key in presses:
        started = time.perf_counter()
        await pilot.press(key)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def shown(name: str, latencies: list[float]) -> None:
    print(
        f"  {name:<34} median {statistics.median(latencies):5.0f} ms,"
        f" worst {max(latencies):5.0f} ms ({len(latencies)} keys)"
    )


async def console(fleet: Fleet) -> None:
    from textual.widgets import DataTable

    from llmgw_tui.app import LlmgwApp
    from llmgw_tui.feed import LiveFeed

    feed = LiveFeed(inventory=None, demo=False, refresh_s=2.0)
    feed._fleet = fleet  # the fleet already open: the feed polls it as the console does
    app = LlmgwApp(feed, animation="none")
    rows = len(fleet.snapshot().nodes)
    async with app.run_test(size=(160, 50)) as pilot:
        started = time.perf_counter()
        table = app.screen.query_one("#nodes", DataTable)
        while table.row_count < rows:
            await pilot.pause(0.01)
        await pilot.pause()
        print(f"console: {rows} rows drawn {time.perf_counter() - started:.1f} s after start")
        print("key latency, press to screen idle, while the fleet is polled every 2 s:")
        shown("fleet: down", await keys(pilot, ["down"] * 40))
        shown("fleet: page down", await keys(pilot, ["pagedown"] * 10))
        shown("fleet: end, home", await keys(pilot, ["end", "home"] * 3))
        shown("fleet: / then typing 'h100-p3'", await keys(pilot, ["slash", *"h100-p3"]))
        shown("fleet: escape (filter cleared)", await keys(pilot, ["escape"]))
        shown("switch to racks (2)", await keys(pilot, ["2"]))
        shown("racks: down, page down", await keys(pilot, ["down"] * 20 + ["pagedown"] * 5))
        shown("switch to fleet (1)", await keys(pilot, ["1"]))
        now, peak = rss_mib()
        print(f"console RSS with the screens drawn: {now:.0f} MiB (peak {peak:.0f} MiB)")
        feed._fleet = None  # the bench closes the fleet itself


async def main(
    total: int,
    pools: int,
    bastion_limit: int,
    discovery_only: bool,
    profile: str | None,
    skip_console: bool = False,
) -> None:
    nodes = nodes_for(total)
    root = Path(tempfile.mkdtemp(prefix="llmgw-scale-"))
    print(f"load before the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    started, console_before = time.perf_counter(), cpu_s()
    sim = await start_sim_fleet(
        root,
        nodes,
        pools=pools,
        max_handshakes_per_bastion=bastion_limit,
        max_handshakes=max(32, bastion_limit),
        banner_timeout_s=BANNER_TIMEOUT_S,
    )
    print(
        f"simulated fleet: {len(nodes)} nodes ({len(sim.silent)} silent) in {pools} pool processes"
        f" behind one bastion, up in {time.perf_counter() - started:.0f} s"
    )
    cpu_phase(
        "starting it (not counted below)",
        cpu_s() - console_before,
        cpu_s([pool.pid for pool in sim.pools[:-1]]),
        cpu_s([sim.pools[-1].pid]),
        len(nodes),
    )
    fleet = None
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        fleet, _ = await discovery(sim)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
            print(f"console profile of discovery written to {profile}")
        if discovery_only:
            return
        await refresh_cycle(fleet)
        plan_over(fleet)
        if not skip_console:
            await console(fleet)
    finally:
        if fleet is not None:
            await fleet.close()
        await sim.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("nodes", nargs="?", type=int, default=2048)
    parser.add_argument("--pools", type=int, default=4)
    parser.add_argument("--bastion-limit", type=int, default=10)
    parser.add_argument("--discovery-only", action="store_true", help="stop after discovery")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the console's discovery")
    parser.add_argument("--skip-console", action="store_true", help="no key latencies")
    args = parser.parse_args()
    chosen = (args.discovery_only, args.profile, args.skip_console)
    asyncio.run(main(args.nodes, args.pools, args.bastion_limit, *chosen))
