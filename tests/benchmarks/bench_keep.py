"""The keeper's cost per cycle and its reaction time, on the demo fleet and on 256 simulated nodes.

    .venv/bin/python tests/benchmarks/bench_keep.py [--nodes 256] [--skip-scale]

Prints, asserts nothing:

* on the demo fleet (23 nodes, sim engines of 4 sequences, the real router):
  the keeper's CPU and wall time per cycle while idle; then, with 32
  clients sending through the gateway, the reaction time: load on → the
  scale-out decision (its `scale_up_after_s`, 3 s here, included) → the new
  replica answering and fronted;
* on `--nodes` simulated nodes behind one bastion (the scale benchmark's
  fleet, `llmgw_core/fleet/sim/fleet.py`): the CPU and wall time of one idle
  keeper cycle, which reads every node's shard listing. That fleet's nodes
  share one process and one agent state folder, so no replica can be served
  on them: the reaction there is this cycle's time, plus `scale_up_after_s`,
  plus a start (measured on the demo).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from llmgw_core.script.context import StepContext
from llmgw_core.script.steps.serve import serve_request
from llmgw_core.serve.http import EngineReach, close_quietly
from llmgw_core.serve.replicas import replicas_now
from llmgw_core.service.keep import Keeper
from llmgw_core.service.lease import service_lease
from llmgw_core.service.spec import ServiceDoc

MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"


def _doc(name: str, gateway: dict[str, Any] | None, gpu_class: str) -> ServiceDoc:
    given: dict[str, Any] = {
        "name": name,
        "model": MODEL,
        "context": 8192,
        "gpu_class": gpu_class,
        "concurrency": 4,
        "replicas": {"min": 1, "max": 2, "target_waiting": 2, "scale_up_after_s": 3},
    }
    if gateway:
        given["gateway"] = gateway
    return ServiceDoc.model_validate(given)


def _send(url: str, body: bytes, stop: threading.Event) -> None:
    while not stop.is_set():
        request = urllib.request.Request(
            url, data=body, headers={"Content-Type": "application/json"}
        )
        with contextlib.suppress(OSError):
            urllib.request.urlopen(request, timeout=30).read()


async def idle_cycles(keeper: Keeper, held: Any, label: str) -> None:
    """Ten keeper cycles with nothing to do: the median CPU and wall time of one."""
    cpu, wall = [], []
    for _ in range(10):
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        await keeper.cycle(held)
        cpu.append(time.process_time() - cpu_before)
        wall.append(time.perf_counter() - wall_before)
    print(
        f"{label}: an idle keeper cycle takes {statistics.median(cpu) * 1000:.0f} ms of CPU "
        f"and {statistics.median(wall) * 1000:.0f} ms of wall time (median of 10)"
    )


async def measure(fleet: Any, doc: ServiceDoc, load_url: str | None, label: str) -> None:
    """Idle cycles, then load until the keeper has a second replica answering."""
    reach = EngineReach(fleet)
    ctx = StepContext(script_dir=Path.cwd(), described_fleet=None, inventory="-", demo=False)
    base, model = serve_request(doc, ctx, name=None)
    keeper = Keeper(fleet, reach, doc, base, model, progress=lambda line: None)
    try:
        async with service_lease(fleet, doc.name) as held:
            for _ in range(3):  # the first replica (and the gateway) come up
                await keeper.cycle(held)
            await idle_cycles(keeper, held, label)
            views = [v for v in await replicas_now(fleet) if v.service == doc.name]
            _node, port, served = views[0].ready_engine()
            url = load_url or f"http://{views[0].http_host}:{port}/v1/chat/completions"
            body = json.dumps(
                {"model": served, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}
            ).encode()
            stop = threading.Event()
            senders = [threading.Thread(target=_send, args=(url, body, stop)) for _ in range(32)]
            load_on = time.time()
            for sender in senders:
                sender.start()
            decided = None
            try:
                while True:
                    await keeper.cycle(held)
                    outs = [e for e in keeper.events if e.action == "scale-out"]
                    if decided is None and outs:  # said when decided, before the start
                        decided = datetime.fromisoformat(outs[0].at).timestamp()
                    ready = [
                        v
                        for v in await replicas_now(fleet)
                        if v.service == doc.name and v.phase == "ready"
                    ]
                    if len(ready) >= 2:
                        break
                    await asyncio.sleep(0.5)
            finally:
                stop.set()
                for sender in senders:
                    sender.join(60)
            answering = time.time()
            assert decided is not None
            print(
                f"{label}: load on → scale-out decided {decided - load_on:.1f} s "
                f"(scale_up_after_s {doc.bounds.scale_up_after_s:g} s of it) → the new replica "
                f"answering and fronted {answering - decided:.1f} s later "
                f"({answering - load_on:.1f} s in all)"
            )
        from llmgw_core.service.apply import stop_service

        await stop_service(fleet, reach, doc.name)
    finally:
        await close_quietly(reach)


async def on_demo() -> None:
    import socket

    from llmgw_core.fleet.session import open_fleet

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    fleet, closer = await open_fleet(inventory=None, demo=True)
    try:
        doc = _doc("bench", {"name": "bench-gw", "port": port}, "h100-80g")
        await measure(fleet, doc, f"http://127.0.0.1:{port}/v1/chat/completions", "demo fleet")
        from llmgw_core.gateway.run import stop_gateway

        with contextlib.suppress(Exception):
            await stop_gateway(fleet, "bench-gw")
    finally:
        await closer()


async def at_scale(total: int) -> None:
    from bench_scale import discovery, nodes_for

    from llmgw_core.fleet.sim.fleet import start_sim_fleet

    root = Path(tempfile.mkdtemp(prefix="llmgw-keep-"))
    sim = await start_sim_fleet(root, nodes_for(total), pools=4)
    fleet = None
    try:
        fleet, _ = await discovery(sim)
        print(f"{total} simulated nodes, {len(fleet.snapshot().ready())} ready")
        doc = ServiceDoc.model_validate(
            {"name": "idle", "model": MODEL, "context": 8192, "replicas": {"min": 0, "max": 2}}
        )
        reach = EngineReach(fleet)
        ctx = StepContext(script_dir=Path.cwd(), described_fleet=None, inventory="-", demo=False)
        base, model = serve_request(doc, ctx, name=None)
        keeper = Keeper(fleet, reach, doc, base, model, progress=lambda line: None)
        async with service_lease(fleet, doc.name) as held:
            await keeper.cycle(held)
            await idle_cycles(keeper, held, f"{total} nodes")
        await close_quietly(reach)
    finally:
        if fleet is not None:
            await fleet.close()
        await sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--skip-scale", action="store_true")
    args = parser.parse_args()
    asyncio.run(on_demo())
    if not args.skip_scale:
        asyncio.run(at_scale(args.nodes))


if __name__ == "__main__":
    main()
