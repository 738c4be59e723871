"""A fabric test's findings change what is served: one headless script on the demo fleet.

The demo's `h100-a-02` has a degraded `mlx5_5` (60 % of its rate). One
script tests the two H100 nodes (`on_fail: continue`, so the failed rail does
not end it), explains and dry-runs a 2 × 8 replica, serves it, lists it and
stops it: the replica's `NCCL_IB_HCA` lacks `mlx5_5` on both nodes, with a
warning naming the rail, its ratio and when it was measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LLAMA = "catalog:meta-llama/Llama-3.3-70B-Instruct"
LAYOUT = f"model: '{LLAMA}', context: 32768, gpu_class: h100-80g, gpus: 8, nodes: 2"
ALL_RAILS = "=" + ",".join(f"mlx5_{i}" for i in range(8))
PASSED_RAILS = "=" + ",".join(f"mlx5_{i}" for i in range(8) if i != 5)
SCRIPT = f"""\
steps:
  - fabric-test: {{nodes: [h100-a-01, h100-a-02], duration_s: 1, on_fail: continue}}
  - explain: {{{LAYOUT}}}
  - serve: {{{LAYOUT}, name: llama-2x8, dry_run: true, rails: all}}
  - serve: {{{LAYOUT}, name: llama-2x8, env: {{NCCL_DEBUG: INFO}}}}
  - replicas: {{name: llama-2x8}}
  - stop: {{replica: llama-2x8}}
"""


def test_a_rail_that_failed_its_fabric_test_is_left_out_of_the_next_replica(tmp_path: Path):
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from llmgw_tui.cli import main; sys.exit(main())",
            "--demo",
            "--run",
            "-",
            "--json",
        ],
        input=SCRIPT,
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        cwd=REPO,
        timeout=300,
    )
    lines = [json.loads(text) for text in done.stdout.splitlines() if text.strip()]
    steps = [(line["step"], line["ok"]) for line in lines]
    assert steps == [
        ("fabric-test", False),
        ("explain", True),
        ("serve", True),
        ("serve", True),
        ("replicas", True),
        ("stop", True),
    ], done.stdout + done.stderr
    assert done.returncode == 1  # the fabric test failed, so the script did too

    tested, explained, dry_run, served, listed, _stopped = lines
    (failed,) = [row for row in tested["result"]["rails"] if row["verdict"] == "fail"]
    assert (failed["adapter_a"], failed["ratio"]) == ("mlx5_5", 0.6)
    assert tested["result"]["recorded"] == ["h100-a-01", "h100-a-02"]
    assert "1 rail(s) fail, first h100-a-01–h100-a-02 mlx5_5" in tested["error"]

    left_out = {
        (rail["node"], rail["adapter"], rail["ratio"])
        for rail in explained["result"]["rails_left_out"]
    }
    assert left_out == {("h100-a-01", "mlx5_5", 0.6), ("h100-a-02", "mlx5_5", 0.6)}

    assert [
        shard["commands"][0]["env"]["NCCL_IB_HCA"] for shard in dry_run["result"]["shards"]
    ] == [
        ALL_RAILS,
        ALL_RAILS,
    ]
    assert dry_run["result"]["rails_left_out"] == []
    assert all("(rails: all)" in warning for warning in dry_run["result"]["warnings"])

    warning = served["result"]["warnings"][0]
    assert warning.startswith(
        "mlx5_5 on h100-a-01 is left out of NCCL_IB_HCA: its fabric test measured 60% of its rate "
        "with h100-a-02 at "
    ) and warning.endswith(" UTC")
    (replica,) = listed["result"]["replicas"]
    assert [shard["node"] for shard in replica["shards"]] == ["h100-a-01", "h100-a-02"]
    for shard in replica["shards"]:
        assert shard["env"]["NCCL_IB_HCA"] == PASSED_RAILS
        assert shard["transport"]["kind"] == "ib"
