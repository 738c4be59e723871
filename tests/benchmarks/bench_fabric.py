"""Benchmark: reading NCCL logs and fabric-test outputs, and a simulated rail end to end.

Run: `.venv/bin/python tests/benchmarks/bench_fabric.py`. Prints figures; asserts nothing.

- NCCL INFO lines read per second (a 16-rank replica's logs are read on every
  refresh of the replica's transport);
- ib_write_bw outputs and all_reduce_perf outputs read per second;
- one simulated rail (server and client halves in two processes, meeting over
  loopback) from start to verdict.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llmgw_core.fabric.nccl import parse_all_reduce_perf, parse_nccl_transport
from llmgw_core.fabric.perftest import parse_ib_write_bw
from llmgw_core.fabric.verdicts import AdapterEnd, judge_rail, pair_rails

AGENT_ROOT = Path(__file__).resolve().parents[2] / "agent"
sys.path.insert(0, str(AGENT_ROOT))

from llmgw_agent.fabric.allreduce import all_reduce  # noqa: E402
from llmgw_agent.sim.engine.lines import nccl_lines  # noqa: E402
from llmgw_agent.sim.profiles import write_profile  # noqa: E402


def rate(label: str, count: int, seconds: float, unit: str) -> None:
    print(f"{label:<48} {count / seconds:>12,.0f} {unit}/s")


def main() -> None:
    engine = {"nnodes": 2, "tp": 8, "pp": 2, "node_rank": 1}
    env = {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}:1" for i in range(8))}
    filler = [f"INFO 11-29 08:30:{i % 60:02d} [worker] loading shard {i}" for i in range(200)]
    log = (nccl_lines(env, "h100-a-02", 4242, engine) + filler) * 200
    started = time.perf_counter()
    transport = parse_nccl_transport(log)
    rate(
        "NCCL log lines read (mixed with engine lines)",
        len(log),
        time.perf_counter() - started,
        "lines",
    )
    print(f"  -> {transport.label}, {len(transport.adapters)} adapters")

    with tempfile.TemporaryDirectory() as folder:
        capture = write_profile("hgx-h100", Path(folder) / "node", degraded_rail="mlx5_5")

        answer = all_reduce(
            {"hosts": ["a", "b"], "gpus_per_node": 8, "max_bytes": 8 * 1024**3}, replay=str(capture)
        )
        output = answer["output"]
        runs = 200
        started = time.perf_counter()
        for _ in range(runs):
            parse_all_reduce_perf(output)
        rate(
            "all_reduce_perf outputs read (2 x 8 ranks)",
            runs,
            time.perf_counter() - started,
            "outputs",
        )

        half = (
            f"import json, sys; sys.path.insert(0, {str(AGENT_ROOT)!r});"
            "from llmgw_agent.fabric.run import fabric_client, fabric_server;"
            "f = fabric_server if sys.argv[1] == 'server' else fabric_client;"
            "print(json.dumps(f(json.loads(sys.argv[2]), lambda e: print(json.dumps(e), flush=True), replay=sys.argv[3])), flush=True)"
        )
        started = time.perf_counter()
        # A throwaway secret for two local processes (the console sends its own over SSH).
        args = {"device": "mlx5_5", "duration_s": 1, "secret": "b3" * 32}
        server = subprocess.Popen(
            [sys.executable, "-S", "-c", half, "server", json.dumps(args), str(capture)],
            stdout=subprocess.PIPE,
            text=True,
        )
        listening = json.loads(server.stdout.readline())
        client_args = {**args, "port": listening["port"], "server_address": "127.0.0.1"}
        client = subprocess.run(
            [sys.executable, "-S", "-c", half, "client", json.dumps(client_args), str(capture)],
            capture_output=True,
            text=True,
            check=True,
        )
        server_answer = json.loads(server.stdout.readline())
        server.wait()
        client_answer = json.loads(client.stdout.splitlines()[-1])
        ends = {"mlx5_5": AdapterEnd(name="mlx5_5", rated_gbps=400)}
        pairs, _ = pair_rails("a", ["mlx5_5"], ends, "b", ["mlx5_5"], ends, 400)
        verdict = judge_rail(pairs[0], server_answer["output"], client_answer["output"])
        elapsed = time.perf_counter() - started
        print(f"{'one simulated rail, two processes, to a verdict':<48} {elapsed:>12.2f} s")
        print(f"  -> {verdict.verdict}: {verdict.reason}")
        runs = 2000
        started = time.perf_counter()
        for _ in range(runs):
            parse_ib_write_bw(client_answer["output"])
        rate("ib_write_bw outputs read", runs, time.perf_counter() - started, "outputs")


if __name__ == "__main__":
    main()
