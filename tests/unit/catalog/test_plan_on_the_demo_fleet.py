"""`llmgw-tui --demo --run` plans a plain Hub id against the live demo fleet, offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "import sys; from llmgw_tui.cli import main; sys.exit(main())"]
SCRIPT = """steps:
  - plan: {model: meta-llama/Llama-3.3-70B-Instruct, context: 32768}
  - plan: {model: Qwen/Qwen2.5-14B-Instruct-GGUF, context: 8192}
"""


def test_the_demo_plans_hub_ids_on_its_live_nodes_from_the_shipped_catalog(
    tmp_path, refusing_endpoint
):
    env = {**os.environ, "TMPDIR": str(tmp_path), "HF_ENDPOINT": refusing_endpoint}
    done = subprocess.run(
        [*CLI, "--demo", "--run", "-", "--json"],
        input=SCRIPT,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line, gguf = [json.loads(text) for text in done.stdout.splitlines() if text.strip()]
    result = line["result"]
    assert line["step"] == "plan" and line["ok"] is True
    assert result["model_source"] == "from the shipped catalog (offline)"
    assert result["shape"]["parameters"] == 70_553_706_496
    # The live fleet, not a described one: the demo's H100 nodes on ib-a, its GB200
    # rack's NVLink domain, and its MIG and L40S nodes named in the notes.
    pools = {way["pool"] for way in result["options"]}
    assert "h100-80g on ib-a" in pools
    assert any(pool.startswith("gb200-186g in NVLink domain") for pool in pools)
    assert any("a100-mig-01" in note for note in result["notes"])
    assert any("l40s-01" in note for note in result["notes"])
    # On the H100 nodes: four cards of one node, tensor parallel.
    h100 = next(way for way in result["options"] if way["gpu_class"] == "h100-80g")
    assert (h100["label"], h100["layout"], h100["nodes"]) == ("4 × h100-80g", "vLLM TP4", 1)
    assert h100["free_now"] is True
    # Best of all: one 186 GB GB200 card holds the whole model (fewest cards first).
    best = result["best"]
    assert (best["label"], best["layout"], best["nodes"]) == ("1 × gb200-186g", "vLLM TP1", 1)
    # A GGUF repository the catalog ships runs on the demo's CPU node too.
    assert gguf["ok"] is True
    assert gguf["result"]["model_source"] == "from the shipped catalog (offline)"
    on_cpu = [way for way in gguf["result"]["options"] if way["on_cpu"]]
    assert on_cpu and {way["pool"] for way in on_cpu} == {"CPU node cpu-01"}
