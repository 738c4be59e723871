"""The README's main job, end to end: `llmgw-tui --run examples/plan-70b.yaml`, offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "plan-70b.yaml"


def _llmgw_tui() -> list[str]:
    """The installed `llmgw-tui` console script beside this interpreter, else the module."""
    script = Path(sys.executable).parent / "llmgw-tui"
    return [str(script)] if script.exists() else [sys.executable, "-m", "llmgw_tui.cli"]


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [*_llmgw_tui(), *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        input=stdin,
        timeout=120,
    )


def test_the_70b_example_plans_four_cards_of_one_node_tensor_parallel():
    done = _run("--run", str(EXAMPLE))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "meta-llama/Llama-3.3-70B-Instruct" in out
    for column in ("FILE", "SIZE", "BEST WAY", "A CARD", "OF", "ALL CARDS", "NOW"):
        assert column in out
    assert "original" in out and "131 GB" in out
    assert "Best: original on 4 × h100-80g (vLLM TP4)" in out
    assert "GB a card (weights 32.9 + context 2.5 + engine" in out
    assert "per 1000 tokens" in out
    assert "Every way, best first" in out
    assert "vllm serve meta-llama/Llama-3.3-70B-Instruct" in out
    assert "--tensor-parallel-size 4" in out


def test_the_70b_example_as_json_is_one_line_with_the_way():
    done = _run("--run", str(EXAMPLE), "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert line["step"] == "plan" and line["ok"] is True
    result = line["result"]
    best = result["best"]
    assert best["engine"] == "vllm"
    assert (best["cards"], best["nodes"], best["tensor_parallel"], best["pipeline_parallel"]) == (
        4,
        1,
        4,
        1,
    )
    assert best["gpu_class"] == "h100-80g" and best["free_now"] is True
    assert best["expert_parallel"] is False and best["quantization"] is None
    assert round(best["weights_gib"], 1) == 32.9
    assert round(best["context_gib"], 1) == 2.5
    assert best["usable_gib"] == 71.27
    parts = best["weights_gib"] + best["context_gib"] + best["engine_gib"]
    assert abs(best["per_card_gib"] - parts) <= 0.015  # each part is rounded on its own
    assert best["serve"].startswith("vllm serve meta-llama/Llama-3.3-70B-Instruct ")
    assert "--tensor-parallel-size 4" in best["serve"]
    for key in (
        "engine",
        "artifact",
        "gpu_class",
        "cards",
        "nodes",
        "tensor_parallel",
        "pipeline_parallel",
        "expert_parallel",
        "quantization",
        "per_card_gib",
        "weights_gib",
        "context_gib",
        "engine_gib",
        "usable_gib",
        "total_gib",
        "free_now",
        "serve",
    ):
        assert key in best, key
    assert [a["name"] for a in result["artifacts"]] == ["original"]
    assert result["artifacts"][0]["best"] == best
    assert result["options"][0] == best
    widths = {
        (w["tensor_parallel"], w["nodes"]) for w in result["options"] if w["engine"] == "vllm"
    }
    assert (8, 1) in widths


def test_a_model_that_fits_nowhere_exits_3_with_what_would_help():
    script = """
fleet:
  - {name: box, gpu: l4-24g, gpus: 2, nvlink: false}
steps:
  - plan: {model: catalog:Qwen/Qwen3-235B-A22B, format: safetensors, context: 8192}
"""
    done = _run("--run", "-", "--json", stdin=script)
    assert done.returncode == 3, done.stderr
    line = json.loads(done.stdout.splitlines()[0])
    assert line["ok"] is False
    assert line["error"].startswith(
        "Qwen/Qwen3-235B-A22B at a context of 8192 tokens fits nowhere in this fleet"
    )
    assert line["result"]["best"] is None
    assert line["result"]["artifacts"][0]["best"] is None
