"""`explain` of disaggregated services on the demo fleet, headless: a 70B split two and two on
the H100 pair over ib-a's rails (the rail the fabric test failed left out of the KV's devices),
and `auto` inside the NVL72 rack over NVLink, each with the advisor's arithmetic; a dry run
builds every worker's command on the rails that passed, each side with its own batch shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LLAMA = "catalog:meta-llama/Llama-3.3-70B-Instruct"
LAYOUT = f"model: '{LLAMA}', context: 16384, engine: vllm"
SCRIPT = f"""\
steps:
  - fabric-test: {{nodes: [h100-a-01, h100-a-02], duration_s: 1, on_fail: continue}}
  - explain:
      {{{LAYOUT}, gpu_class: h100-80g, gpus: 4, disaggregation: {{prefill: {{replicas: 2}},
        decode: {{replicas: 2}}, workload: {{input_tokens: 8000, output_tokens: 200,
        ttft_s: 2, itl_s: 0.05}}}}}}
  - explain:
      {{{LAYOUT}, gpu_class: gb200-186g, gpus: 4, disaggregation: {{auto: true, connector: mooncake,
        workload: {{input_tokens: 1500, output_tokens: 300, ttft_s: 1, itl_s: 0.05}}}}}}
  - serve:
      {{{LAYOUT}, gpu_class: h100-80g, gpus: 4, dry_run: true, disaggregation: {{
        prefill: {{replicas: 2}}, decode: {{replicas: 2}}, connector: mooncake}}}}
  - serve: {{{LAYOUT}, gpu_class: gb200-186g, gpus: 4, dry_run: true, disaggregation: auto}}
  - serve:
      {{{LAYOUT}, gpu_class: h100-80g, gpus: 4, dry_run: true,
        engine_args: {{max_num_batched_tokens: 4096}}, disaggregation: {{prefill: {{replicas: 1}},
        decode: {{replicas: 1}}, workload: {{input_tokens: 12000, output_tokens: 500}}}}}}
  - explain:
      {{{LAYOUT}, gpu_class: h100-80g, gpus: 8, disaggregation: {{prefill: {{replicas: 2}},
        decode: {{replicas: 1}}}}}}
"""


@pytest.fixture(scope="module")
def steps() -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "llmgw_tui.cli", "--demo", "--run", "-", "--json"],
        input=SCRIPT,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return [json.loads(text) for text in done.stdout.splitlines() if text.strip()]


def test_two_and_two_on_the_h100_pair_leave_the_failed_rail_out_of_the_kv_transfer(steps):
    explain = steps[1]
    assert explain["step"] == "explain" and explain["ok"], explain
    split = explain["result"]["disaggregation"]
    assert split["transport"] == "infiniband" and split["interconnect"] == "ib-a"
    assert split["replicas"] == {"prefill": 2, "decode": 2}
    kept = [f"mlx5_{i}" for i in range(8) if i != 5]
    assert split["rails"] == {"h100-a-01": kept, "h100-a-02": kept}
    assert any(w.startswith("mlx5_5 on h100-a-02 is left out of the KV") for w in split["warnings"])
    advice = split["advice"]
    assert advice["pays"] and advice["ratio"] == "7:1"
    assert "rails of ib-a, measured" in advice["arithmetic"][1]


def test_auto_inside_the_nvl72_rack_takes_the_advisors_ratio_over_nvlink(steps):
    split = steps[2]["result"]["disaggregation"]
    assert steps[2]["ok"], steps[2]
    assert split["transport"] == "nvlink" and split["rails"] == {}
    assert split["engine_name"] == "MooncakeConnector"
    ratio = split["advice"]["ratio"]
    assert f"{split['replicas']['prefill']}:{split['replicas']['decode']}" == ratio
    assert len(split["prefill"]) == split["replicas"]["prefill"]


def test_no_room_for_both_sides_on_one_interconnect_fails_the_step_with_the_reason(steps):
    explain = steps[6]
    assert explain["step"] == "explain" and not explain["ok"], explain
    assert explain["error"].startswith(
        "no interconnect has room for 2 prefill (8 h100-80g) and 1 decode (8 h100-80g) together"
    )
    assert "ib-a: room for 0 of 1 decode replicas" in explain["error"]


def test_a_dry_run_builds_every_workers_command_on_the_rails_that_passed(steps):
    serve = steps[3]
    assert serve["step"] == "serve" and serve["ok"], serve
    workers = serve["result"]["workers"]
    assert [w["role"] for w in workers] == ["prefill", "prefill", "decode", "decode"]
    prefill = workers[0]["shards"][0]["commands"][0]
    config = prefill["argv"][prefill["argv"].index("--kv-transfer-config") + 1]
    assert json.loads(config) == {"kv_connector": "MooncakeConnector", "kv_role": "kv_producer"}
    assert prefill["env"]["MC_MS_FILTERS"] == ",".join(f"mlx5_{i}" for i in range(8) if i != 5)
    ports = {
        (
            w["shards"][0]["node"],
            w["shards"][0]["commands"][0]["env"]["VLLM_MOONCAKE_BOOTSTRAP_PORT"],
        )
        for w in workers
    }
    assert len(ports) == 4  # two workers on one node never share a handshake port


def test_a_dry_run_of_auto_shows_one_worker_a_side_and_says_where_the_ratio_comes_from(steps):
    serve = steps[4]
    assert serve["step"] == "serve" and serve["ok"], serve
    assert [w["role"] for w in serve["result"]["workers"]] == ["prefill", "decode"]
    assert serve["result"]["disaggregation"]["transport"] == "nvlink"
    assert "`explain` gives the advisor's ratio" in serve["result"]["warnings"][-1]


def _flag(worker: dict, flag: str) -> str:
    argv = worker["shards"][0]["commands"][0]["argv"]
    return argv[argv.index(flag) + 1]


def test_explain_of_a_split_shows_each_sides_batch_shape_with_its_arithmetic(steps):
    shapes = steps[1]["result"]["disaggregation"]["shapes"]
    prefill, decode = shapes["prefill"], shapes["decode"]
    kv = decode["kv_tokens"]
    assert (prefill["max_seqs"], prefill["step_tokens"]) == (16, 8192)
    assert prefill["arithmetic"].startswith(f"prefill: {kv:,} KV tokens ÷ 8,000 a prompt = ")
    assert decode["max_seqs"] == kv // 8200 > prefill["max_seqs"]
    assert decode["arithmetic"] == (
        f"decode: {kv:,} KV tokens ÷ 8,200 a whole context = {kv // 8200} → {kv // 8200}"
        " sequences; max_num_batched_tokens 256 (one token a sequence, at least 256)"
    )


def test_each_workers_command_carries_its_sides_shape_at_the_whole_context_without_a_workload(
    steps,
):
    workers = steps[3]["result"]["workers"]
    prefill, decode = workers[0], workers[2]
    assert _flag(prefill, "--max-num-batched-tokens") == "16384"  # a prompt filling the context
    assert int(_flag(prefill, "--max-num-seqs")) == prefill["shape"]["max_seqs"] == 16
    assert int(_flag(decode, "--max-num-seqs")) == decode["shape"]["kv_tokens"] // 16384
    assert _flag(decode, "--max-num-batched-tokens") == "256"


def test_the_operators_step_budget_wins_on_both_sides_and_the_sequences_follow_the_workload(steps):
    serve = steps[5]
    assert serve["step"] == "serve" and serve["ok"], serve
    prefill, decode = serve["result"]["workers"]
    assert _flag(prefill, "--max-num-batched-tokens") == _flag(decode, "--max-num-batched-tokens")
    assert _flag(prefill, "--max-num-batched-tokens") == "4096"
    argv = prefill["shards"][0]["commands"][0]["argv"]
    assert argv.count("--max-num-batched-tokens") == 1
    assert _flag(prefill, "--max-num-seqs") == "16"
    assert int(_flag(decode, "--max-num-seqs")) == decode["shape"]["kv_tokens"] // 12500
    assert "(the operator's)" in decode["shape"]["arithmetic"]
