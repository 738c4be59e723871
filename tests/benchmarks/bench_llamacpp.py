"""Benchmark: a real llama.cpp shard on this machine, from `shard.start` to its first token.

Run: `.venv/bin/python tests/benchmarks/bench_llamacpp.py`. Prints figures; asserts nothing.
The path is the e2e test's (`tests/e2e/test_llamacpp_real.py`): the real agent
behind asyncssh's in-process SSH server, llama-cpp-python's server built by
the engine builder, the tiny GGUF of `tests/support/tiny_gguf.py`, and a
streamed chat completion through an SSH tunnel. Then the same through the
console as a person runs it: `llmgw-tui --run` with `serve`, `ask` and
`stop`, timed from its own trace. Needs `llama-cpp-python[server]`.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import _paths  # noqa: F401  (tests/support on the path)
import httpx

# The helpers of tests/e2e/test_llamacpp_real.py, a test module, are not a harness of tests/support.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from test_llamacpp_real import (
    NODE,
    chat_body,
    engine_url,
    free_port,
    launch_plan,
    pinned_client,
    run_script_on_this_machine,
    started_shard,
    this_machine_as_a_node,
    wait_healthy,
)
from tiny_gguf import write_tiny_llama_gguf

from llmgw_core.fleet.fleet import Fleet

RUNS = 5


async def first_token_s(fleet: Fleet, http_port: int) -> tuple[float, int]:
    """Seconds from sending a streamed chat completion to its first content chunk.

    Returns the seconds and how many streams were cut before a token came
    (llama-cpp-python ends a stream when another request, such as the
    agent's health probe of `/v1/models`, waits for the model); a cut stream
    is asked again.
    """
    cuts = 0
    async with engine_url(fleet, NODE, http_port) as base, pinned_client() as http:
        while cuts < 10:
            sent = time.perf_counter()
            body = chat_body("Who are you?", stream=True)
            try:
                async with http.stream("POST", f"{base}/v1/chat/completions", json=body) as answer:
                    async for line in answer.aiter_lines():
                        if not line.startswith("data: {"):
                            continue
                        if json.loads(line[6:])["choices"][0]["delta"].get("content"):
                            return time.perf_counter() - sent, cuts
            except httpx.RemoteProtocolError:
                pass
            cuts += 1
    raise RuntimeError("every stream was cut before its first token")


async def one_run(folder: Path) -> dict[str, float]:
    """One shard: start → healthy → first token → stopped, each step timed."""
    model = write_tiny_llama_gguf(folder / "models" / "tiny-llama" / "tiny.gguf")
    http_port = free_port()
    async with this_machine_as_a_node(folder, folder / "models") as fleet:
        spec = next(spec for spec in fleet.inventory.node_specs() if spec.name == NODE)
        plan = launch_plan(spec, fleet.snapshot().nodes[NODE].facts, model, http_port)
        client = fleet.client(NODE)
        started = time.perf_counter()
        async with started_shard(client, plan, "bench") as shard_id:
            await wait_healthy(client, shard_id)
            healthy = time.perf_counter()
            token, cuts = await first_token_s(fleet, http_port)
            first_token = time.perf_counter()
        stopped = time.perf_counter()
    return {
        "start → healthy (agent saw 200)": healthy - started,
        "request → first token": token,
        "start → first token": first_token - started,
        "stop": stopped - first_token,
        "cuts": cuts,
    }


def _trace_s(trace: list[dict[str, str]], first: str, last: str) -> float:
    at = {entry["step"]: datetime.fromisoformat(entry["at"]) for entry in trace}
    return (at[last] - at[first]).total_seconds()


def one_script(folder: Path) -> dict[str, float]:
    """`llmgw-tui --run` serving, asking and stopping: the console's own figures."""
    model_dir = folder / "models"
    model = write_tiny_llama_gguf(model_dir / "tiny-llama" / "tiny.gguf")
    steps = (
        f"  - serve: {{model: {model}, engine: llama.cpp, context: 256, name: tiny}}\n"
        '  - ask: {replica: tiny, prompt: "Who are you?", max_tokens: 16}\n'
        "  - stop: {replica: tiny}\n"
    )
    began = time.perf_counter()
    done, _ = run_script_on_this_machine(folder, steps, model_dir, str(model))
    wall_s = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    served, asked, _ = [json.loads(line) for line in done.stdout.splitlines()]
    return {
        "script: placed → health answered": _trace_s(
            served["result"]["trace"], "placed", "health answered"
        ),
        "script: ask latency": float(asked["result"]["latency_s"]),
        "script: whole llmgw-tui run": wall_s,
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
        scripts = [one_script(root / f"script{index}") for index in range(RUNS)]
    cuts = sum(int(run.pop("cuts")) for run in runs)
    for run, script in zip(runs, scripts, strict=True):
        run.update(script)
    for name in runs[0]:
        values = [run[name] for run in runs]
        print(
            f"{name:36} median {statistics.median(values):.2f} s"
            f"  (min {min(values):.2f}, max {max(values):.2f}, {RUNS} runs)"
        )
    print(f"streams cut before their first token: {cuts} (asked again)")


if __name__ == "__main__":
    main()
