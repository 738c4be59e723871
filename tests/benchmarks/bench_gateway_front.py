"""Benchmark: the gateway's front, routing by itself, against the router alone and the front
it replaced (key checks in front of vllm-router), side by side in one run.

Run: `.venv/bin/python tests/benchmarks/bench_gateway_front.py`. Prints figures; asserts nothing.

Everything on this machine, no SSH (a tunnel would hide the difference):
two sim engines (vLLM's shape, loaded at once), and three paths to them:

* `router alone`: the real vllm-router 0.1.17 on the loopback (no key check);
* `before`: the front as it was until the router was dropped (`git show
  BEFORE:agent/llmgw_agent/front/server.py`, run from a temporary copy: a
  client key checked, then the router);
* `after`: today's front, a client key checked, then its own round-robin
  choice of an engine.

The same client (httpx, keep-alive, `CONCURRENCY` at a time) sends
`REQUESTS` chat completions to each path in alternating rounds; the median
of the rounds is compared.
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

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "agent"
BEFORE = "13e6c81"
"""The last commit whose gateway ran vllm-router behind the front."""
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


def _old_front(root: Path) -> Path:
    """The front of `BEFORE`, written out of git beside the bench's other files."""
    text = subprocess.run(
        ["git", "show", f"{BEFORE}:agent/llmgw_agent/front/server.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = root / "old_front.py"
    path.write_text(text + "\n\nif __name__ == '__main__':\n    sys.exit(main(sys.argv[1:]))\n")
    return path


@contextlib.contextmanager
def stack() -> Iterator[tuple[str, str, str]]:
    """Two keyed sim engines and the three paths to them: (router, before, after) URLs."""
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
            config = {
                "keys": [{"id": "bench", "key": CLIENT_KEY, "models": None}],
                "upstream": {MODEL: ENGINE_KEY},
            }
            env = {**base_env, "LLMGW_FRONT_CONFIG": json.dumps(config)}
            before_port, metrics = _port(), _port()
            processes.append(
                subprocess.Popen(
                    [
                        *(sys.executable, "-S", str(_old_front(Path(root)))),
                        *("--listen", f"127.0.0.1:{before_port}"),
                        *("--router", f"127.0.0.1:{router_port}"),
                        *("--metrics", f"127.0.0.1:{metrics}"),
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            before = f"http://127.0.0.1:{before_port}"
            after_port = _port()
            control = Path(root) / "control"
            control.mkdir(mode=0o700)
            processes.append(
                subprocess.Popen(
                    [
                        *(sys.executable, "-S", "-m", "llmgw_agent", "front"),
                        *("--listen", f"127.0.0.1:{after_port}", "--policy", "round_robin"),
                        *("--control", str(control / "front.sock")),
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            after = f"http://127.0.0.1:{after_port}"
            _wait(after + "/liveness")
            from llmgw_agent.front.control import call

            for engine in engines:
                call(
                    str(control / "front.sock"),
                    "POST",
                    "/workers",
                    {"url": engine, "model_id": MODEL},
                )
            _wait(before + "/liveness")
            yield router, before, after
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
    with stack() as (router, before, after):
        # The router passes the client's header on: straight to it, the engines' key is needed.
        paths = (("router alone", router, ENGINE_KEY), ("before", before, CLIENT_KEY))
        paths += (("after", after, CLIENT_KEY),)
        for _, url, key in paths:
            asyncio.run(load(url, key))
        runs: dict[str, list[tuple[float, list[float]]]] = {label: [] for label, _, _ in paths}
        for _ in range(ROUNDS):
            for label, url, key in paths:
                runs[label].append(asyncio.run(load(url, key)))
    print(f"{REQUESTS} requests, {CONCURRENCY} at a time, median of {ROUNDS} alternating rounds:")
    rates = {}
    for label, measured in runs.items():
        rates[label] = statistics.median(r for r, _ in measured)
        p50 = statistics.median(statistics.median(lat) for _, lat in measured) * 1000
        p99 = statistics.median(sorted(lat)[int(len(lat) * 0.99)] for _, lat in measured) * 1000
        print(f"  {label:<13}: {rates[label]:8.1f} requests/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    for label in ("before", "after"):
        change = (rates[label] / rates["router alone"] - 1) * 100
        print(f"  {label}: {change:+.1f} % requests/s against the router alone")


if __name__ == "__main__":
    main()
