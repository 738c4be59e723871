"""A described fleet is planned per distinct node shape, not per node.

Its schema allows 100,000 nodes of 1,024 cards an entry: built node by node,
card by card, that is a hundred million objects and minutes of work (a
held-out corpus found it exhausting memory). Every node of an entry now
shares one devices tuple, and the planner measures each shape once; the
benchmark (`tests/benchmarks/bench_plan.py`) prints the time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from llmgw_core.planner.pools import described_fleet

LARGEST = {"name": "dgx", "count": 100_000, "gpu": "h100-80g", "gpus": 1024, "fabric": "ib-a"}


def test_the_nodes_of_one_entry_share_one_shape():
    fleet = described_fleet([LARGEST, {"name": "cpu", "count": 3, "memory_gib": 512}])
    assert len(fleet.nodes) == 100_003
    dgx = [node for node in fleet.nodes if node.devices]
    assert len({id(node.devices) for node in dgx}) == 1
    assert len({id(node.nvlink_groups) for node in dgx}) == 1
    assert (dgx[0].name, dgx[-1].name) == ("dgx-1", "dgx-100000")
    (pool,) = [pool for pool in fleet.pools() if not pool.is_cpu]
    assert pool.nodes_with(1024, free_only=True) == 100_000


def test_the_largest_legal_described_fleet_is_planned(tmp_path: Path):
    script = tmp_path / "largest.yaml"
    script.write_text(
        json.dumps(
            {
                "fleet": [LARGEST],
                "steps": [{"plan": {"model": "catalog:meta-llama/Llama-3.1-8B-Instruct",
                                    "context": 8192}}],
            }
        )
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "llmgw_tui.cli", "--run", str(script), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = [json.loads(row) for row in done.stdout.splitlines() if row.startswith("{")]
    assert line["ok"] and line["result"]["best"] is not None
