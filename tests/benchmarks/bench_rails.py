"""Benchmark: what keeping and using fabric verdicts costs.

Run: `.venv/bin/python tests/benchmarks/bench_rails.py`. Prints figures; asserts nothing.

- `choose_rails` for a replica of N nodes × 8 rails whose every pair was
  tested (N × (N − 1) × 8 verdicts), one rail failing: it runs on every
  serve, dry run and explain of a multi-node replica;
- the agent's `fabric.record` of a 64-node matrix (63 peers × 8 rails on one
  node) into its state file, and reading it back (every facts refresh).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from llmgw_core.fabric.rails import choose_rails
from llmgw_core.facts import RailVerdict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "agent"))

from llmgw_agent.fabric.verdicts import read_verdicts, record_verdicts

RAILS = [f"mlx5_{i}" for i in range(8)]
AT = 1_796_150_400.0


def _verdicts(nodes: list[str]) -> dict[str, list[RailVerdict]]:
    kept: dict[str, list[RailVerdict]] = {}
    for node in nodes:
        kept[node] = [
            RailVerdict(
                peer=peer,
                adapter=rail,
                verdict="fail"
                if rail == "mlx5_5" and {node, peer} == {nodes[0], nodes[1]}
                else "pass",
                ratio=0.6 if rail == "mlx5_5" else 0.97,
                measured_at=AT,
            )
            for peer in nodes
            if peer != node
            for rail in RAILS
        ]
    return kept


def bench_choose_rails() -> None:
    for count in (2, 16, 64):
        nodes = [f"node-{i:03d}" for i in range(count)]
        kept = _verdicts(nodes)
        hcas = {node: RAILS for node in nodes}
        runs = max(1, 2000 // count)
        started = time.perf_counter()
        for _ in range(runs):
            choice = choose_rails(nodes, hcas, kept)
        took_ms = (time.perf_counter() - started) / runs * 1000
        verdicts = sum(len(v) for v in kept.values())
        print(
            f"choose_rails: {count} nodes, {verdicts} verdicts → {len(choice.left_out)} left out "
            f"in {took_ms:.2f} ms"
        )


def bench_record_and_read() -> None:
    with tempfile.TemporaryDirectory() as state:
        os.environ["LLMGW_AGENT_STATE"] = state
        rows = [
            {"peer": f"node-{p:03d}", "adapter": rail, "verdict": "pass", "ratio": 0.97}
            for p in range(1, 64)
            for rail in RAILS
        ]
        started = time.perf_counter()
        for start in range(0, len(rows), 256):
            record_verdicts({"rails": rows[start : start + 256]})
        record_ms = (time.perf_counter() - started) * 1000
        runs = 200
        started = time.perf_counter()
        for _ in range(runs):
            kept = read_verdicts()
        read_ms = (time.perf_counter() - started) / runs * 1000
        size_kib = (Path(state) / "fabric" / "rails.json").stat().st_size / 1024
        print(
            f"fabric.record: {len(rows)} verdicts in {record_ms:.1f} ms; "
            f"read back ({len(kept)}, {size_kib:.0f} KiB) in {read_ms:.2f} ms"
        )


if __name__ == "__main__":
    bench_choose_rails()
    bench_record_and_read()
