"""Benchmark: what the console's gateway views cost, and how late a router's line reaches its log.

Run: `.venv/bin/python tests/benchmarks/bench_gateway_console.py`. Prints figures; asserts nothing.
On the demo fleet (real agents over real SSH, sim engines, the real
vllm-router): two replicas of one model behind a gateway on cpu-01.

* one read of the replicas screen's gateway line (`gateway_summaries`) and
  one read of the gateways screen (`gateway_details`: the same plus the
  router's Prometheus text), median and worst of 20;
* the time from a change of the router's workers (through its API) to the
  router's `Added worker` line arriving through the followed log
  (`gateway_log_batches`, what the console's logs view reads), median of 10.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time

import _paths  # noqa: F401  (tests/support on the path)
from bench_gateway import two_replicas_behind_a_gateway
from serve_demo_harness import Demo

from llmgw_core.gateway.run import (
    change_workers,
    find_gateway,
    gateway_log_batches,
    gateway_summaries,
    router_workers,
)
from llmgw_core.gateway.spec import Worker
from llmgw_core.metrics.gateway import gateway_details
from llmgw_core.serve.http import EngineReach, close_quietly

READS = 20
CHANGES = 10
PORT = 30651


def main() -> None:
    with two_replicas_behind_a_gateway(PORT) as demo:
        run(demo)


def run(demo: Demo) -> None:
    nodes = len(demo.fleet.snapshot().ready())
    summaries_s, details_s, line_s = demo.loop.run(measure(demo), 600)
    for label, times in (
        (f"gateway line read (gateway_summaries, {nodes} nodes)", summaries_s),
        ("gateways screen read (gateway_details)", details_s),
    ):
        print(
            f"{label}: median {statistics.median(times) * 1000:.0f} ms, "
            f"worst {max(times) * 1000:.0f} ms over {len(times)}"
        )
    print(
        f"router's 'Added worker' line in the followed log: median "
        f"{statistics.median(line_s) * 1000:.0f} ms, worst {max(line_s) * 1000:.0f} ms "
        f"over {len(line_s)} changes"
    )


async def measure(demo: Demo) -> tuple[list[float], list[float], list[float]]:
    fleet = demo.fleet
    reach = EngineReach(fleet)
    try:
        await gateway_details(fleet, reach)  # tunnels opened before timing
        summaries_s, details_s = [], []
        for _ in range(READS):
            started = time.perf_counter()
            await gateway_summaries(fleet, reach)
            summaries_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            await gateway_details(fleet, reach)
            details_s.append(time.perf_counter() - started)
        return summaries_s, details_s, await line_latencies(fleet, reach)
    finally:
        await close_quietly(reach)


async def line_latencies(fleet: object, reach: EngineReach) -> list[float]:
    """Remove and add one worker; time until the router's line about the add arrives."""
    gateway = await find_gateway(fleet, "front")
    workers = await _workers(reach, gateway)
    url, model = next(iter(workers.items()))
    arrived: asyncio.Queue[tuple[float, str]] = asyncio.Queue()

    async def follow() -> None:
        async for batch in gateway_log_batches(fleet, "front", lines=1, follow=True):
            for line in batch:
                await arrived.put((time.perf_counter(), line))

    reader = asyncio.ensure_future(follow())
    found = []
    try:
        await asyncio.sleep(1.0)
        for _ in range(CHANGES):
            await change_workers(reach, gateway, (), (url,))
            while not arrived.empty():
                arrived.get_nowait()
            started = time.perf_counter()
            await change_workers(reach, gateway, (Worker(url=url, model=model, replica=""),), ())
            while True:
                at, line = await asyncio.wait_for(arrived.get(), 30)
                if "Added worker" in line and url in line:
                    found.append(at - started)
                    break
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    return found


async def _workers(reach: EngineReach, gateway: object) -> dict[str, str]:
    return {u: w["model"] for u, w in (await router_workers(reach, gateway)).items()}


if __name__ == "__main__":
    main()
