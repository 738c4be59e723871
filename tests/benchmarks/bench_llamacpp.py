"""Benchmark: a real llama.cpp shard on this machine, from `shard.start` to its first token.

Run: `.venv/bin/python tests/benchmarks/bench_llamacpp.py`. Prints figures; asserts nothing.
The path is the e2e test's (`tests/e2e/test_llamacpp_real.py`): the real agent
behind asyncssh's in-process SSH server, llama-cpp-python's server built by
the engine builder, the tiny GGUF of `tests/e2e/tiny_gguf.py`, and a
streamed chat completion through an SSH tunnel. Needs
`llama-cpp-python[server]`.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from test_llamacpp_real import (
    NODE,
    SERVED_NAME,
    free_port,
    launch_plan,
    this_machine_as_a_node,
    wait_healthy,
)
from tiny_gguf import write_tiny_llama_gguf

from llmgw_core.fleet.fleet import Fleet
from llmgw_core.fleet.ssh import SshTarget

RUNS = 5


async def first_token_s(fleet: Fleet, http_port: int) -> float:
    """Seconds from sending a streamed chat completion to its first content chunk."""
    spec = next(spec for spec in fleet.inventory.node_specs() if spec.name == NODE)
    connection = await fleet.connector.connect(
        SshTarget(node=spec.name, host=spec.host, port=spec.port)
    )
    try:
        tunnel = await connection.forward_local_port("127.0.0.1", 0, "127.0.0.1", http_port)
        url = f"http://127.0.0.1:{tunnel.get_port()}/v1/chat/completions"
        body = {
            "model": SERVED_NAME,
            "messages": [{"role": "user", "content": "Who are you?"}],
            "max_tokens": 16,
            "stream": True,
        }
        async with httpx.AsyncClient(timeout=60) as http:
            sent = time.perf_counter()
            async with http.stream("POST", url, json=body) as response:
                async for line in response.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    if delta.get("content"):
                        return time.perf_counter() - sent
        raise RuntimeError("the stream ended without a token")
    finally:
        connection.close()


async def one_run(folder: Path) -> dict[str, float]:
    """One shard: start → healthy → first token → stopped, each step timed."""
    model = write_tiny_llama_gguf(folder / "models" / "tiny-llama" / "tiny.gguf")
    http_port = free_port()
    async with this_machine_as_a_node(folder, folder / "models") as fleet:
        spec = next(spec for spec in fleet.inventory.node_specs() if spec.name == NODE)
        plan = launch_plan(spec, fleet.snapshot().nodes[NODE].facts, model, http_port)
        client = fleet.client(NODE)
        started = time.perf_counter()
        shard = await client.request("shard.start", plan.head.start_args("bench"), timeout_s=30)
        await wait_healthy(client, shard["shard_id"])
        healthy = time.perf_counter()
        token = await first_token_s(fleet, http_port)
        first_token = time.perf_counter()
        await client.request("shard.stop", {"shard_id": shard["shard_id"]}, timeout_s=60)
        stopped = time.perf_counter()
    return {
        "start → healthy (agent saw 200)": healthy - started,
        "request → first token": token,
        "start → first token": first_token - started,
        "stop": stopped - first_token,
    }


def in_process_load_s(folder: Path) -> float:
    """Seconds for llama.cpp to load the tiny GGUF in this process."""
    from llama_cpp import Llama

    path = write_tiny_llama_gguf(folder / "load.gguf")
    started = time.perf_counter()
    Llama(str(path), n_ctx=256, verbose=False)
    return time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        written = time.perf_counter()
        size = write_tiny_llama_gguf(root / "size.gguf").stat().st_size
        print(f"tiny GGUF: {size / 1024:.0f} KiB written in {time.perf_counter() - written:.3f} s")
        print(f"in-process load: {in_process_load_s(root):.3f} s")
        runs = [asyncio.run(one_run(root / f"run{index}")) for index in range(RUNS)]
    for name in runs[0]:
        values = [run[name] for run in runs]
        print(
            f"{name:34} median {statistics.median(values):.2f} s"
            f"  (min {min(values):.2f}, max {max(values):.2f}, {RUNS} runs)"
        )


if __name__ == "__main__":
    main()
