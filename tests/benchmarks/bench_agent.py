"""Benchmark: the agent's start-up to `hello`, its memory, and an RPC round trip.

Run: `.venv/bin/python tests/benchmarks/bench_agent.py`. Prints figures; asserts nothing.
The agent runs as on a node: `python -S`, only `agent/` on the path.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AGENT_ROOT = Path(__file__).resolve().parents[2] / "agent"
RUNS = 15
PINGS = 2000


def _env(state: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMGW_")}
    env["PYTHONPATH"] = str(AGENT_ROOT)
    env["LLMGW_AGENT_STATE"] = state
    return env


def bare_python_s() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-S", "-c", "pass"], check=True)
    return time.perf_counter() - started


def start_agent(state: str) -> tuple[subprocess.Popen, float]:
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-S", "-m", "llmgw_agent", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=_env(state),
    )
    assert process.stdout is not None
    hello = json.loads(process.stdout.readline())
    assert "hello" in hello
    return process, time.perf_counter() - started


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def round_trips(process: subprocess.Popen) -> list[float]:
    assert process.stdin is not None and process.stdout is not None
    times = []
    for index in range(PINGS):
        started = time.perf_counter()
        process.stdin.write(json.dumps({"id": index, "op": "ping"}).encode() + b"\n")
        process.stdin.flush()
        json.loads(process.stdout.readline())
        times.append(time.perf_counter() - started)
    return times


def pipelined_s(process: subprocess.Popen, count: int) -> float:
    assert process.stdin is not None and process.stdout is not None
    started = time.perf_counter()
    lines = b"".join(
        json.dumps({"id": f"p{i}", "op": "ping"}).encode() + b"\n" for i in range(count)
    )
    process.stdin.write(lines)
    process.stdin.flush()
    for _ in range(count):
        process.stdout.readline()
    return time.perf_counter() - started


def _call(process: subprocess.Popen, request_id: str, op: str, args: dict) -> dict:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps({"id": request_id, "op": op, "args": args}).encode() + b"\n")
    process.stdin.flush()
    while True:
        reply = json.loads(process.stdout.readline())
        if reply.get("id") == request_id and "event" not in reply:
            assert reply["ok"], reply
            return reply["result"]


def shard_cycle(process: subprocess.Popen) -> tuple[float, float]:
    """Seconds for shard.start and shard.stop of a sleeping engine."""
    spec = {
        "replica": "bench",
        "rank": 0,
        "gpus": ["0"],
        "commands": [{"name": "engine", "argv": ["sleep", "60"]}],
    }
    started = time.perf_counter()
    shard_id = _call(process, "start", "shard.start", spec)["shard_id"]
    start_s = time.perf_counter() - started
    time.sleep(0.2)
    started = time.perf_counter()
    _call(process, "stop", "shard.stop", {"shard_id": shard_id, "timeout_s": 5})
    return start_s, time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory() as state:
        bare = statistics.median(bare_python_s() for _ in range(RUNS))
        hello_times = []
        for _ in range(RUNS):
            process, took = start_agent(state)
            hello_times.append(took)
            process.stdin.close()
            process.wait()
        to_hello = statistics.median(hello_times)
        print(f"python3 -S -c pass            {bare * 1000:7.1f} ms (median of {RUNS})")
        print(f"agent start -> hello          {to_hello * 1000:7.1f} ms (median of {RUNS})")
        print(f"ratio                         {to_hello / bare:7.2f} x")

        process, _ = start_agent(state)
        print(f"agent RSS after hello         {rss_kib(process.pid) / 1024:7.1f} MiB")
        times = round_trips(process)
        print(
            f"ping round trip               {statistics.median(times) * 1e6:7.0f} us median, "
            f"{sorted(times)[int(len(times) * 0.99)] * 1e6:.0f} us p99 ({PINGS} sequential)"
        )
        took = pipelined_s(process, PINGS)
        print(f"pipelined pings               {PINGS / took:7.0f} per second ({PINGS} in flight)")
        print(f"agent RSS after {2 * PINGS} pings     {rss_kib(process.pid) / 1024:7.1f} MiB")
        start_s, stop_s = shard_cycle(process)
        print(
            f"shard.start answered          {start_s * 1000:7.1f} ms (supervisor up, handlers set)"
        )
        print(f"shard.stop answered           {stop_s * 1000:7.1f} ms (SIGTERM obeyed)")
        process.stdin.close()
        process.wait()


if __name__ == "__main__":
    main()
