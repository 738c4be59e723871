"""Benchmark: what the gateway costs, and how its worker list is best changed.

Run: `.venv/bin/python tests/benchmarks/bench_gateway.py`. Prints figures; asserts nothing.
On the demo fleet (real agents over real SSH, sim engines, the gateway's
front routing by itself): two replicas of one model behind a gateway on cpu-01.

* requests/s asking one replica directly through its SSH tunnel, against
  asking through the gateway (same kind of tunnel, to the front), at the
  same concurrency;
* the time to change the front's workers on its control socket (through the
  agent's `gateway.call`), against restarting the gateway with a new list
  (stop, start, liveness).
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import _paths  # noqa: F401  (tests/support on the path)
from serve_demo_harness import Demo

from llmgw_core.gateway.run import change_workers, find_gateway, follow, router_workers
from llmgw_core.serve.tunnels import fleet_and_reach

MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"
REQUESTS = 400
CONCURRENCY = 8
ROUNDS = 3


@contextlib.contextmanager
def two_replicas_behind_a_gateway(port: int) -> Iterator[Demo]:
    """The demo fleet with replicas `a` and `b` of `MODEL` behind gateway `front` on `port`.

    Everything is stopped on the way out, whatever failed.
    """
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as root:
        demo = Demo(Path(root))
        try:
            for name in ("a", "b"):
                demo.step("serve", model=MODEL, context=8192, gpu_class="h100-80g", name=name)
            demo.step("gateway", name="front", port=port)
            yield demo
        finally:
            with contextlib.suppress(Exception):
                demo.step("stop", gateway="front")
            for name in ("a", "b"):
                with contextlib.suppress(Exception):
                    demo.step("stop", replica=name)
            demo.close()


def main() -> None:
    with two_replicas_behind_a_gateway(30600) as demo:
        run(demo)


def run(demo: Demo) -> None:
    # Warm both paths (tunnels, connections) before measuring.
    demo.step("bench", replica="a", requests=16, concurrency=CONCURRENCY)
    demo.step("bench", gateway="front", requests=16, concurrency=CONCURRENCY)
    direct, through = [], []
    split: dict[str, int] = {}
    for _ in range(ROUNDS):
        one = demo.step("bench", replica="a", requests=REQUESTS, concurrency=CONCURRENCY).result
        direct.append(one)
        many = demo.step("bench", gateway="front", requests=REQUESTS, concurrency=CONCURRENCY)
        through.append(many.result)
        split = many.result["split"]
    direct_rps = statistics.median(r["requests_per_s"] for r in direct)
    gateway_rps = statistics.median(r["requests_per_s"] for r in through)
    print(f"{REQUESTS} requests, {CONCURRENCY} at a time, median of {ROUNDS} rounds:")
    print(
        f"  one replica directly : {direct_rps:8.1f} requests/s, "
        f"p50 {statistics.median(r['latency_s']['p50'] for r in direct) * 1000:.1f} ms, "
        f"p99 {statistics.median(r['latency_s']['p99'] for r in direct) * 1000:.1f} ms"
    )
    print(
        f"  through the gateway  : {gateway_rps:8.1f} requests/s, "
        f"p50 {statistics.median(r['latency_s']['p50'] for r in through) * 1000:.1f} ms, "
        f"p99 {statistics.median(r['latency_s']['p99'] for r in through) * 1000:.1f} ms "
        f"({(gateway_rps / direct_rps - 1) * 100:+.1f} %)"
    )
    print(f"  last split           : {split}")
    api_s, restart_s = workerchange_workers_times(demo)
    print(
        f"worker list change on the control socket (remove, then follow adds it back): {api_s * 1000:.1f} ms median"
    )
    print(f"gateway restart with a new list (stop, start, liveness): {restart_s:.2f} s median")


def workerchange_workers_times(demo: Demo) -> tuple[float, float]:
    async def api_round() -> float:
        fleet, reach = await fleet_and_reach(demo.ctx)
        gateway = await find_gateway(fleet, "front")
        url = sorted(await router_workers(reach, gateway))[0]
        started = time.perf_counter()
        await change_workers(reach, gateway, (), (url,))
        # Back through `follow`, as a serve does: it adds the worker with its certificate.
        (added,) = (await follow(fleet, reach, gateway))["added"]
        assert added == url, (added, url)
        return time.perf_counter() - started

    api = [demo.loop.run(api_round()) for _ in range(10)]
    restarts = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        demo.step("stop", gateway="front")
        demo.step("gateway", name="front", port=30600)
        restarts.append(time.perf_counter() - started)
    return statistics.median(api), statistics.median(restarts)


if __name__ == "__main__":
    main()
