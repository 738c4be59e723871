"""Benchmark: what checking client keys at the gateway costs, against the router alone.

Run: `.venv/bin/python tests/benchmarks/bench_gateway_front.py`. Prints figures; asserts nothing.

Everything on this machine, no SSH (a tunnel would hide the difference):
two sim engines (vLLM's shape, loaded at once), the real vllm-router in
front of them on the loopback, and the gateway's front (`llmgw front`, a
client key and the engines' key) in front of the router. The same client
(httpx, keep-alive, `CONCURRENCY` at a time) sends `REQUESTS` chat
completions to the router directly and to the front, in alternating rounds;
the median of the rounds is compared.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from llmgw_core.fleet.sim.demo import demo_router

AGENT = Path(__file__).resolve().parents[2] / "agent"
REQUESTS = 2000
CONCURRENCY = 8
ROUNDS = 5
CLIENT_KEY = "sk-bench-client-0123456789"
ENGINE_KEY = "sk-bench-engine-9876543210"
MODEL = "bench-model"


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait(url: str, headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, headers=headers).status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{url} never answered")


@contextlib.contextmanager
def stack() -> Iterator[tuple[str, str]]:
    """Two keyed sim engines, the router over them, the front over it: (router URL, front URL)."""
    router_bin = demo_router()
    if router_bin is None:
        raise SystemExit("vllm-router is not installed (the test extra installs it)")
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="bench-front-") as root:
        base_env = {
            **os.environ,
            "PYTHONPATH": str(AGENT),
            "LLMGW_AGENT_STATE": str(Path(root) / "state"),
            "LLMGW_SIM_LOAD_S": "0",
        }
        try:
            engines = []
            for _ in range(2):
                port = _port()
                argv = ["vllm", "serve", "/m", "--served-model-name", MODEL, "--port", str(port)]
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-S", "-m", "llmgw_agent", "sim-engine", "--", *argv],
                        env={**base_env, "VLLM_API_KEY": ENGINE_KEY},
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
                engines.append(f"http://127.0.0.1:{port}")
            router_port, prometheus = _port(), _port()
            processes.append(
                subprocess.Popen(
                    [
                        router_bin,
                        *("--host", "127.0.0.1", "--port", str(router_port), "--enable-igw"),
                        *("--prometheus-port", str(prometheus), "--log-level", "warning"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            router = f"http://127.0.0.1:{router_port}"
            for engine in engines:
                _wait(engine + "/health")
            _wait(router + "/liveness")
            for engine in engines:
                httpx.post(router + "/workers", json={"url": engine, "model_id": MODEL})
            body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
            deadline = time.monotonic() + 30
            while (
                httpx.post(
                    router + "/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {ENGINE_KEY}"},
                ).status_code
                != 200
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError("the router never took its workers")
                time.sleep(0.1)
            front_port, metrics = _port(), _port()
            config = {
                "keys": [{"id": "bench", "key": CLIENT_KEY, "models": None}],
                "upstream": {MODEL: ENGINE_KEY},
            }
            processes.append(
                subprocess.Popen(
                    [
                        *(sys.executable, "-S", "-m", "llmgw_agent", "front"),
                        *("--listen", f"127.0.0.1:{front_port}"),
                        *("--router", f"127.0.0.1:{router_port}"),
                        *("--metrics", f"127.0.0.1:{metrics}"),
                    ],
                    env={**base_env, "LLMGW_FRONT_CONFIG": json.dumps(config)},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            front = f"http://127.0.0.1:{front_port}"
            _wait(front + "/liveness")
            yield router, front
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(10)


async def load(url: str, key: str) -> tuple[float, list[float]]:
    """`REQUESTS` chat completions, `CONCURRENCY` at a time: requests/s and each latency."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16}
    headers = {"Authorization": f"Bearer {key}"}
    latencies: list[float] = []
    gate = asyncio.Semaphore(CONCURRENCY)
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def one() -> None:
            async with gate:
                started = time.perf_counter()
                answer = await client.post(url + "/v1/chat/completions", json=body, headers=headers)
                answer.raise_for_status()
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(REQUESTS)))
        return REQUESTS / (time.perf_counter() - started), latencies


def main() -> None:
    with stack() as (router, front):
        # The router passes the client's header on: straight to it, the engines' key is needed.
        asyncio.run(load(router, ENGINE_KEY))
        asyncio.run(load(front, CLIENT_KEY))
        alone, fronted = [], []
        for _ in range(ROUNDS):
            alone.append(asyncio.run(load(router, ENGINE_KEY)))
            fronted.append(asyncio.run(load(front, CLIENT_KEY)))
    print(f"{REQUESTS} requests, {CONCURRENCY} at a time, median of {ROUNDS} alternating rounds:")
    for label, runs in (("router alone", alone), ("front + router", fronted)):
        rps = statistics.median(r for r, _ in runs)
        p50 = statistics.median(statistics.median(lat) for _, lat in runs) * 1000
        p99 = statistics.median(sorted(lat)[int(len(lat) * 0.99)] for _, lat in runs) * 1000
        print(f"  {label:<15}: {rps:8.1f} requests/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    alone_rps = statistics.median(r for r, _ in alone)
    fronted_rps = statistics.median(r for r, _ in fronted)
    print(f"  the front costs {(1 - fronted_rps / alone_rps) * 100:+.1f} % of the throughput")


if __name__ == "__main__":
    main()
