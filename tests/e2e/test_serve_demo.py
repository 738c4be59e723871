"""Serving on the demo fleet, headless: the steps a script runs, against real agents over SSH.

One demo fleet for the module; each test stops what it served, so the next
finds every card free again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kept_demo import example_on_a_free_port
from serve_demo_harness import Demo

REPO = Path(__file__).resolve().parents[2]
LLAMA = "catalog:meta-llama/Llama-3.3-70B-Instruct"
IB_A = "=" + ",".join(f"mlx5_{i}" for i in range(8))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    running = Demo(tmp_path_factory.mktemp("serve-demo"))
    try:
        yield running
    finally:
        running.close()


def _served(demo: Demo, **args: Any) -> dict[str, Any]:
    outcome = demo.step("serve", **args)
    assert outcome.ok, outcome.error
    return outcome.result


def test_llama_70b_at_32k_comes_up_on_four_h100_cards_of_one_node_and_answers(demo: Demo):
    result = _served(demo, model=LLAMA, context=32768, gpu_class="h100-80g", name="llama-70b")
    assert result["phase"] == "ready"
    assert result["way"]["label"] == "4 × h100-80g" and result["way"]["tensor_parallel"] == 4
    (placed,) = result["placement"]["nodes"]
    assert placed["node"] == "h100-a-01" and len(placed["gpus"]) == 4
    steps = [entry["step"] for entry in result["trace"]]
    assert steps[:2] == ["placed", "claimed, process started"] and steps[-1] == "health answered"
    assert "port open" in steps

    listed = demo.step("replicas", name="llama-70b", phase="ready")
    assert listed.ok, listed.error
    (replica,) = listed.result["replicas"]
    assert replica["engine"] == "vllm" and replica["endpoint"].startswith("h100-a-01:")
    (shard,) = replica["shards"]
    assert shard["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(placed["gpus"])
    # The transport proof is on without being asked for, and a one-node replica's
    # network plugin (Socket here) is never what it is said to run over.
    assert (shard["env"]["NCCL_DEBUG"], shard["env"]["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT")
    assert shard["transport"]["label"] == "NVLink"
    assert shard["transport"]["inside"] == {"label": "NVLink", "pairs": {"nvlink": 4}}
    assert replica["transport_warnings"] == []
    assert "--tensor-parallel-size" in shard["argv"] and "32768" in shard["argv"]

    answer = demo.step("ask", replica="llama-70b", prompt="Say hello.")
    assert answer.ok and "meta-llama/Llama-3.3-70B-Instruct" in answer.result["text"]

    figures = demo.step("bench", replica="llama-70b", requests=8, concurrency=4)
    assert figures.ok and figures.result["completion_tokens"] > 0
    print(
        f"bench on the demo: {figures.result['tokens_per_s']} tokens/s, p50 {figures.result['latency_s']['p50']} s"
    )

    stopped = demo.step("stop", replica="llama-70b")
    assert stopped.ok and stopped.result["stopped"][0]["gpus"] == placed["gpus"]
    assert demo.claims() == {}


def test_forced_over_two_nodes_both_ranks_use_ib_a_and_say_net_ib(demo: Demo):
    result = _served(
        demo,
        model=LLAMA,
        context=32768,
        gpu_class="h100-80g",
        gpus=8,
        nodes=2,
        env={"NCCL_DEBUG": "INFO"},
        name="llama-2x8",
    )
    assert result["placement"]["fabric"] == "ib-a"
    (replica,) = demo.step("replicas", name="llama-2x8").result["replicas"]
    assert [s["node"] for s in replica["shards"]] == ["h100-a-01", "h100-a-02"]
    for shard in replica["shards"]:
        assert shard["env"]["NCCL_IB_HCA"] == IB_A
        assert shard["env"]["NCCL_DEBUG"] == "INFO"
    lines = demo.step("logs", replica="llama-2x8", lines=500).result["lines"]
    for rank, node in ((0, "h100-a-01"), (1, "h100-a-02")):
        assert any(
            line.startswith(f"[r{rank} {node}]") and "NET/IB : Using" in line for line in lines
        )
    assert not any("NET/Socket" in line for line in lines)
    (replica,) = demo.step("replicas", name="llama-2x8").result["replicas"]
    for shard in replica["shards"]:
        transport = shard["transport"]
        assert transport["label"] == "NVLink + IB + GDR" and transport["kind"] == "ib"
        assert transport["inside"]["pairs"] == {"nvlink": 7}
        assert transport["gpudirect"] is True and transport["mnnvl"] is False
        assert transport["adapters"] == [f"mlx5_{i}:1/IB" for i in range(8)]
    assert replica["transport_warnings"] == []
    demo.step("stop", replica="llama-2x8")
    assert demo.claims() == {}


def test_a_two_node_replica_told_not_to_use_its_adapters_is_shown_and_warned_as_socket(
    demo: Demo,
):
    _served(
        demo,
        model=LLAMA,
        context=32768,
        gpu_class="h100-80g",
        gpus=8,
        nodes=2,
        env={"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "1"},
        name="llama-2x8-tcp",
    )
    listed = demo.step("replicas", name="llama-2x8-tcp")
    (replica,) = listed.result["replicas"]
    labels = [s["transport"]["label"] for s in replica["shards"]]
    assert labels == ["NVLink + Socket (TCP)"] * 2
    assert all(s["transport"]["adapters"] == [] for s in replica["shards"])
    (warning,) = replica["transport_warnings"]
    assert warning.startswith(
        "llama-2x8-tcp: NCCL fell back to TCP sockets on h100-a-01, h100-a-02 — it runs, slowly"
    )
    from rich.console import Console

    from llmgw_core.script.steps.replicas import render_replicas

    console = Console(record=True, width=300)
    console.print(render_replicas(listed.result))
    assert "NCCL fell back to TCP sockets" in console.export_text()
    demo.step("stop", replica="llama-2x8-tcp")
    assert demo.claims() == {}


def test_across_trays_the_replica_stays_in_the_nvl72_domain_off_the_tray_that_did_not_join(
    demo: Demo,
):
    result = _served(
        demo,
        model="catalog:Qwen/Qwen3-235B-A22B",
        context=8192,
        gpu_class="gb200-186g",
        gpus=4,
        nodes=16,
        env={"NCCL_DEBUG": "INFO"},
        name="qwen-nvl72",
    )
    placement = result["placement"]
    nodes = [n["node"] for n in placement["nodes"]]
    assert len(nodes) == 16 and "gb200-r1-t13" not in nodes and "gb200-r1-t07" not in nodes
    assert placement["nvlink_domain"] == "4f2c9a1e-7b3d-4c55-9e61-0a8d2b7c3f10"
    assert result["way"]["expert_parallel"] is True
    (replica,) = demo.step("replicas", name="qwen-nvl72").result["replicas"]
    for shard in replica["shards"]:
        assert shard["env"]["NCCL_MNNVL_ENABLE"] == "1" and shard["env"]["NCCL_CUMEM_ENABLE"] == "1"
    lines = demo.step("logs", replica="qwen-nvl72", lines=200).result["lines"]
    assert sum(1 for line in lines if "MNNVL 1" in line) >= 1
    (replica,) = demo.step("replicas", name="qwen-nvl72").result["replicas"]
    labels = {s["transport"]["label"] for s in replica["shards"]}
    assert labels == {"NVLink across trays (MNNVL)"}
    demo.step("stop", replica="qwen-nvl72")


def test_two_l40s_cards_behind_different_host_bridges_talk_through_host_memory_unwarned(
    demo: Demo,
):
    _served(
        demo,
        model="catalog:meta-llama/Llama-3.1-8B-Instruct",
        context=8192,
        gpu_class="l40s-48g",
        gpus=2,
        name="llama-8b-l40s",
    )
    (replica,) = demo.step("replicas", name="llama-8b-l40s").result["replicas"]
    (shard,) = replica["shards"]
    # PCIe cards without a switch between them: NCCL's default P2P level on an
    # Intel host stops at PXB, so it copies through host memory, as it should.
    assert shard["transport"]["label"] == "host memory (SHM)"
    assert replica["transport_warnings"] == []
    demo.step("stop", replica="llama-8b-l40s")


def test_nvlink_cards_whose_nccl_took_host_memory_are_warned_in_red(demo: Demo):
    _served(
        demo,
        model=LLAMA,
        context=32768,
        gpu_class="h100-80g",
        env={"NCCL_P2P_DISABLE": "1"},
        name="llama-70b-shm",
    )
    listed = demo.step("replicas", name="llama-70b-shm")
    (replica,) = listed.result["replicas"]
    (shard,) = replica["shards"]
    assert shard["transport"]["label"] == "host memory (SHM)"
    (warning,) = replica["transport_warnings"]
    assert warning.startswith(
        "llama-70b-shm: on h100-a-01, NCCL joined NVLink cards (0–1, 0–3, 1–2, 2–3) "
        "through host memory (SHM)"
    )
    assert "NCCL_P2P_DISABLE" in warning
    demo.step("stop", replica="llama-70b-shm")


def test_a_replica_that_turned_the_proof_off_or_uses_one_card_says_why_its_transport_is_unknown(
    demo: Demo,
):
    _served(
        demo,
        model=LLAMA,
        context=32768,
        gpu_class="h100-80g",
        env={"NCCL_DEBUG": "WARN"},
        name="llama-70b-quiet",
    )
    _served(
        demo,
        model="catalog:meta-llama/Llama-3.1-8B-Instruct",
        context=8192,
        gpu_class="h100-80g",
        gpus=1,
        name="llama-8b-one",
    )
    listed = demo.step("replicas").result["replicas"]
    unknown = {r["name"]: r["shards"][0]["transport"] for r in listed}
    assert unknown["llama-70b-quiet"] == {
        "label": None,
        "unknown": "NCCL_DEBUG=WARN: NCCL does not say",
    }
    assert unknown["llama-8b-one"] == {"label": None, "unknown": "one card: no NCCL"}
    demo.step("stop", replica="llama-70b-quiet")
    demo.step("stop", replica="llama-8b-one")


def test_a_mig_replica_runs_on_one_instance(demo: Demo):
    result = _served(
        demo,
        model="catalog:meta-llama/Llama-3.1-8B-Instruct",
        context=8192,
        gpu_class="a100-80g-mig-3g.40gb",
        name="llama-8b-mig",
    )
    (placed,) = result["placement"]["nodes"]
    assert placed["node"] == "a100-mig-01" and placed["gpus"] == ["1000"]
    (replica,) = demo.step("replicas", name="llama-8b-mig").result["replicas"]
    assert replica["shards"][0]["env"]["CUDA_VISIBLE_DEVICES"].startswith("MIG-")
    assert demo.step("ask", replica="llama-8b-mig", prompt="hi").ok
    demo.step("stop", replica="llama-8b-mig")


def test_a_gguf_file_is_served_by_llama_cpp_on_the_cpu_node(demo: Demo):
    result = _served(
        demo,
        model="catalog:Qwen/Qwen2.5-14B-Instruct-GGUF",
        format="gguf",
        context=8192,
        gpu_class="cpu",
        name="qwen-gguf",
    )
    assert result["way"]["engine"] == "llama.cpp" and result["way"]["artifact"] == "Q8_0"
    assert result["placement"]["nodes"][0]["node"] == "cpu-01"
    answer = demo.step("ask", replica="qwen-gguf", prompt="hi")
    assert answer.ok and "llama.cpp" in answer.result["text"]
    demo.step("stop", replica="qwen-gguf")


def test_safetensors_are_served_by_vllm_on_the_cpu_node_with_the_kv_cache_the_plan_sized(
    demo: Demo,
):
    result = _served(
        demo,
        model="catalog:meta-llama/Llama-3.1-8B-Instruct",
        engine="vllm",
        context=8192,
        concurrency=4,
        gpu_class="cpu",
        name="llama-8b-cpu",
    )
    # 4 × 8192 tokens × 128 KiB a token is 4 GiB, whole: VLLM_CPU_KVCACHE_SPACE=4.
    assert (result["way"]["engine"], result["way"]["cpu_kv_cache_gib"]) == ("vllm", 4)
    assert result["placement"]["nodes"][0]["node"] == "cpu-01"
    replica = result["replica"]
    (shard,) = replica["shards"]
    assert shard["env"]["VLLM_CPU_KVCACHE_SPACE"] == "4" and shard["gpus"] == []
    assert shard["transport"]["unknown"] == "a CPU node: no NCCL"
    figures = replica["figures"]
    assert (figures["kv_device"], figures["kv_cache_gib"], figures["kv_sized"]) == (
        "CPU",
        4.0,
        "explicit",
    )
    assert replica["figure_warnings"] == []
    assert demo.step("ask", replica="llama-8b-cpu", prompt="hi").ok
    demo.step("stop", replica="llama-8b-cpu")


def test_a_local_gguf_file_is_copied_to_the_node_that_serves_it(demo: Demo, tmp_path: Path):
    from tiny_gguf import write_tiny_llama_gguf

    model = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    result = _served(demo, model=str(model), context=512, gpu_class="cpu", name="tiny")
    # The demo's nodes share this machine's disk, so the file is already at its path there.
    (checked,) = [e for e in result["trace"] if e["step"].startswith("weights")]
    assert (checked["node"], checked["step"], checked["detail"]) == (
        "cpu-01",
        "weights present",
        str(model),
    )
    (replica,) = demo.step("replicas", name="tiny").result["replicas"]
    assert str(model) in replica["shards"][0]["argv"]
    demo.step("stop", replica="tiny")


def test_explain_says_node_by_node_why_a_model_that_fits_nowhere_is_not_placed(
    demo: Demo, tmp_path: Path
):
    from llmgw_core.catalog import write_model_dir

    folder = write_model_dir(LLAMA, tmp_path)
    for old in folder.glob("*.safetensors"):
        old.unlink()
    (folder / "model-00001-of-00001.safetensors").touch()
    index = {
        "metadata": {"total_size": 40 * 1024**4},  # 40 TiB: more than the whole fleet holds
        "weight_map": {"lm_head.weight": "model-00001-of-00001.safetensors"},
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    outcome = demo.step("explain", model=str(folder), context=8192)
    assert not outcome.ok and outcome.exit_code == 3
    assert "fits nowhere" in outcome.error
    reasons = {n["node"]: n["reason"] for n in outcome.result["nodes"]}
    assert len(reasons) == 23
    assert reasons["h100-a-01"].startswith("memory: 8 free h100-80g (570 GB usable)")
    assert reasons["cpu-01"].startswith("memory: 461 GB of RAM usable")


def test_explain_for_a_way_names_the_chosen_nodes_and_why_the_rest_are_not(demo: Demo):
    outcome = demo.step(
        "explain", model=LLAMA, context=32768, gpu_class="gb200-186g", gpus=4, nodes=3
    )
    assert outcome.ok
    reasons = {n["node"]: n["reason"] for n in outcome.result["nodes"]}
    assert reasons["gb200-r1-t01"] == "chosen: rank 0 on 0, 1, 2, 3"
    assert reasons["gb200-r1-t13"].startswith("domain: its cards have not joined the NVLink domain")
    assert reasons["h100-a-01"] == "class: it has h100-80g, not gb200-186g"


def test_explain_plans_with_the_engine_flags_it_would_start_with_and_names_them(demo: Demo):
    common = dict(model=LLAMA, context=32768, gpu_class="h100-80g", engine="vllm")
    plain = demo.step("explain", **common)
    fp8 = demo.step("explain", **common, engine_args={"kv_cache_dtype": "fp8"})
    assert plain.ok and fp8.ok
    assert fp8.result["engine_args"] == {"kv_cache_dtype": "fp8"}
    assert fp8.result["way"]["per_card_gib"] < plain.result["way"]["per_card_gib"] - 1
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="port is llmgw's to set"):
        demo.step("explain", **common, engine_args={"port": 1})


def test_a_headless_script_serves_asks_and_stops_on_the_demo(tmp_path: Path):
    script = (
        "steps:\n"
        f"  - serve: {{model: '{LLAMA}', context: 32768, gpu_class: h100-80g, name: llama-70b}}\n"
        "  - replicas: {name: llama-70b, phase: ready}\n"
        "  - ask: {replica: llama-70b, prompt: Say hello.}\n"
        "  - stop: {replica: llama-70b}\n"
    )
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
        input=script,
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        cwd=REPO,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(text) for text in done.stdout.splitlines() if text.strip()]
    assert [line["step"] for line in lines] == ["serve", "replicas", "ask", "stop"]
    assert all(line["ok"] for line in lines)
    assert lines[0]["result"]["phase"] == "ready"
    assert "Llama-3.3-70B" in lines[2]["result"]["text"]


def test_a_start_that_stalls_fails_with_each_shards_last_lines_and_the_fallback_is_tried(
    demo: Demo,
):
    try:
        outcome = demo.step(
            "serve",
            model=LLAMA,
            context=32768,
            gpu_class="h100-80g",
            name="stalls",
            fallbacks=1,
            timeout=0.2,
        )
        assert not outcome.ok and outcome.exit_code == 1
        attempts = outcome.result["attempts"]
        assert [a["way"] for a in attempts] == ["4 × h100-80g", "4 × h100-80g"]
        assert all(a["reason"] == "nothing moved for 0.2 s (startup timeout)" for a in attempts)
        (lines,) = attempts[0]["last_lines"].values()
        # What the shard's log held last when it stalled: the agent's start line, the engine's
        # banner, or NCCL joining its four cards (which depends on when the stall was seen:
        # under load the engine may not have printed yet).
        said = ("[llmgw] started vllm", "sim vllm engine", "NCCL INFO")
        assert lines and any(word in line for line in lines for word in said)
        assert outcome.error.startswith("stalls did not come up: nothing moved")
        (replica,) = demo.step("replicas", name="stalls").result["replicas"]
        assert replica["phase"] == "stopped" and replica["engine"] == "sglang"  # the fallback's
        assert demo.claims() == {}
    finally:
        # On a machine loaded past its cores a 0.2 s stall can be missed and the replica come
        # up: stop it whatever happened, so the module's next tests find their cards free.
        demo.step("stop", replica="stalls")


def test_a_nodes_download_of_the_weights_counts_as_progress(demo: Demo):
    import asyncio
    import contextlib

    from llmgw_core.serve.start import StartProgress, Trace, hub_cache_dir, watch_download

    cache = hub_cache_dir("example-org/example-model")
    folder = demo.demo.servers["cpu-01"].home / cache
    folder.mkdir(parents=True)

    async def watch() -> tuple[StartProgress, Trace]:
        progress, trace = StartProgress(), Trace()
        watcher = asyncio.ensure_future(
            watch_download(demo.fleet, "cpu-01", cache, progress, trace)
        )
        await asyncio.sleep(0.5)
        before = progress.last_moved
        (folder / "blob-1").write_bytes(b"\0" * 3_000_000)
        await asyncio.sleep(3.0)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        assert progress.last_moved > before
        return progress, trace

    progress, trace = demo.loop.run(watch())
    assert progress.fetched == {"cpu-01": 3_000_000}
    assert [(s["node"], s["step"], s["detail"]) for s in trace.steps] == [
        ("cpu-01", "fetch began", cache)
    ]
    assert progress.fetch_summary("cpu-01").startswith("0.0 GB at ")


def test_weights_a_node_lacks_are_copied_over_sftp_and_then_found_present(
    demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from llmgw_core.serve.http import EngineReach
    from llmgw_core.serve.weights import copy_to_node

    # A relative path is this process's folder here and the node's home there:
    # two disks, as a real node has, although the demo's nodes share this machine's.
    monkeypatch.chdir(tmp_path)
    model = Path("models/tiny-dir")
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "model.safetensors").write_bytes(b"\1" * 70_000)
    reach = EngineReach(demo.fleet)
    assert demo.loop.run(copy_to_node(reach, "l40s-01", str(model))) == "copied"
    there = demo.demo.servers["l40s-01"].home / model
    assert (there / "sub" / "model.safetensors").read_bytes() == b"\1" * 70_000
    assert not (there.parent / "tiny-dir.llmgw-partial").exists()
    assert demo.loop.run(copy_to_node(reach, "l40s-01", str(model))) == "present"
    (model / "sub" / "model.safetensors").write_bytes(b"\2" * 80_000)  # changed: copied again
    assert demo.loop.run(copy_to_node(reach, "l40s-01", str(model))) == "copied"
    assert (there / "sub" / "model.safetensors").stat().st_size == 80_000


def test_serve_started_returns_at_once_and_a_second_replica_of_that_name_is_refused(demo: Demo):
    import time

    from llmgw_core.errors import BadInput

    started = _served(
        demo,
        model="catalog:meta-llama/Llama-3.1-8B-Instruct",
        context=8192,
        gpu_class="l40s-48g",
        name="quick",
        wait="started",
    )
    assert started["phase"] == "starting"
    with pytest.raises(BadInput, match="a replica named 'quick' already runs"):
        demo.step(
            "serve", model="catalog:meta-llama/Llama-3.1-8B-Instruct", context=8192, name="quick"
        )
    deadline = time.monotonic() + 60
    while demo.step("replicas", name="quick").result["replicas"][0]["phase"] != "ready":
        assert time.monotonic() < deadline, "quick never became ready"
        time.sleep(0.5)
    demo.step("stop", replica="quick")


def test_an_engine_variable_outside_the_allowlist_is_refused_before_anything_starts(demo: Demo):
    from llmgw_core.errors import BadInput

    with pytest.raises(BadInput, match="LD_PRELOAD"):
        demo.step(
            "serve",
            model=LLAMA,
            context=32768,
            gpu_class="h100-80g",
            env={"LD_PRELOAD": "/tmp/x.so"},
        )
    assert demo.claims() == {}


def test_a_dry_run_shows_the_command_and_environment_of_each_node_and_starts_nothing(demo: Demo):
    from rich.console import Console

    from llmgw_core.script.steps.serve import render_serve

    outcome = demo.step(
        "serve",
        model=LLAMA,
        context=32768,
        gpu_class="h100-80g",
        gpus=8,
        nodes=2,
        env={"NCCL_DEBUG": "INFO"},
        name="llama-2x8-dry",
        dry_run=True,
    )
    assert outcome.ok, outcome.error
    preview = outcome.result
    assert preview["dry_run"] is True and preview["way"]["label"] == "2 nodes × 8 × h100-80g"
    assert preview["placement"]["fabric"] == "ib-a"
    assert [(s["node"], s["rank"], s["serves_http"]) for s in preview["shards"]] == [
        ("h100-a-01", 0, True),
        ("h100-a-02", 1, False),
    ]
    head = preview["shards"][0]
    assert (
        preview["health_url"]
        == head["health_url"]
        == f"https://127.0.0.1:{head['http_port']}/health"
    )
    # Rank 0 serves HTTPS with the replica's certificate: the agent fills the placeholders.
    argv = head["commands"][-1]["argv"]
    assert argv[argv.index("--ssl-keyfile") + 1] == "@LLMGW_TLS_KEYFILE@"
    assert "--ssl-keyfile" not in preview["shards"][1]["commands"][-1]["argv"]
    for shard in preview["shards"]:
        engine = shard["commands"][-1]
        assert engine["env"]["NCCL_IB_HCA"] == IB_A and engine["env"]["NCCL_DEBUG"] == "INFO"
        assert engine["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(shard["gpus"])
        assert engine["shell"].split()[0] == engine["argv"][0]
    console = Console(record=True, width=400)
    console.print(render_serve(preview))
    table = console.export_text()
    assert "llama-2x8-dry (dry run): 2 nodes × 8 × h100-80g" in table
    assert "h100-a-02" in table and f"NCCL_IB_HCA={IB_A}" in table
    assert demo.claims() == {}
    assert demo.step("replicas").result["replicas"] == []


def test_a_dry_run_hides_the_hub_token_and_names_the_fallbacks(demo: Demo):
    from llmgw_core.script.steps.plan import step_model
    from llmgw_core.serve.choice import Overrides
    from llmgw_core.serve.start import ServeRequest, preview_serve

    request = ServeRequest(
        model=LLAMA,
        context=32768,
        overrides=Overrides(gpu_class="h100-80g"),
        fallbacks=1,
        secret_env={"HF_TOKEN": "hf_not_for_your_eyes"},
    )
    model = step_model(LLAMA, demo.ctx)
    preview = demo.loop.run(preview_serve(demo.fleet, request, model))
    shown = json.dumps(preview.as_dict())
    assert "hf_not_for_your_eyes" not in shown
    assert "HF_TOKEN" not in preview.shards[0]["commands"][-1]["env"]
    # Named, never shown: the Hub token, and the engine's TLS key with its certificate.
    assert preview.shards[0]["secrets"] == [
        "HF_TOKEN",
        "LLMGW_ENGINE_TLS_CERT",
        "LLMGW_ENGINE_TLS_KEY",
    ]
    assert "PRIVATE KEY" not in shown
    assert preview.way is not None and preview.way["label"] == "4 × h100-80g"
    assert preview.fallbacks == ("4 × h100-80g",)  # the same cards with the next engine
    assert demo.claims() == {}


def test_a_port_something_else_listens_on_is_never_given_to_an_engine(demo: Demo):
    import socket

    from llmgw_core.serve.prepare import free_port

    with socket.socket() as other_server:
        other_server.bind(("0.0.0.0", 0))
        other_server.listen()
        taken = other_server.getsockname()[1]
        answer = demo.loop.run(
            demo.fleet.request("cpu-01", "port.free", {"start": taken, "count": 2})
        )
        assert taken in answer["listening"] and taken not in answer["ports"]
        assert len(answer["ports"]) == 2 and all(p > taken for p in answer["ports"])
        # Our own shards' ports are avoided too, listening yet or not.
        first = answer["ports"][0]
        chosen = demo.loop.run(free_port(demo.fleet, "cpu-01", taken, {first}))
        assert chosen not in (taken, first) and chosen > taken


def test_an_all_reduce_preflight_that_fails_stops_the_serve_before_a_card_is_claimed(demo: Demo):
    outcome = demo.step(
        "serve",
        model=LLAMA,
        context=32768,
        gpu_class="h100-80g",
        gpus=8,
        nodes=2,
        env={"NCCL_IB_DISABLE": "1"},  # the test takes the engine's path: TCP
        name="llama-2x8-checked",
        all_reduce=True,
    )
    assert not outcome.ok and outcome.exit_code == 1
    (attempt,) = outcome.result["attempts"]
    assert attempt["reason"] == (
        "all_reduce_perf across h100-a-01, h100-a-02 failed: "
        "1.4 of 400 GB/s per node across 2 nodes (0%)"
    )
    steps = [e["step"] for e in outcome.result["trace"]]
    assert steps == ["placed", "all_reduce began", "all_reduce ended"]
    assert demo.claims() == {}


def test_an_all_reduce_preflight_that_passes_lets_the_replica_start(demo: Demo):
    result = _served(
        demo,
        model=LLAMA,
        context=32768,
        gpu_class="h100-80g",
        gpus=8,
        nodes=2,
        name="llama-2x8-checked",
        all_reduce=True,
        wait="started",
    )
    (ended,) = [e for e in result["trace"] if e["step"] == "all_reduce ended"]
    assert ended["detail"] == "pass: 371.3 of 400 GB/s per node across 2 nodes (93%)"
    assert result["trace"][-1]["step"] == "claimed, process started"
    demo.step("stop", replica="llama-2x8-checked")
    assert demo.claims() == {}


def test_explain_says_what_the_chosen_cards_should_talk_over_by_their_topology(demo: Demo):
    nvlink = demo.step("explain", model=LLAMA, context=32768, gpu_class="h100-80g")
    assert nvlink.ok, nvlink.error
    assert nvlink.result["inside"] == {"h100-a-01": "NVLink"}
    pcie = demo.step(
        "explain",
        model="catalog:meta-llama/Llama-3.1-8B-Instruct",
        context=8192,
        gpu_class="l40s-48g",
        gpus=2,
    )
    assert pcie.ok, pcie.error
    assert pcie.result["way"]["over_pcie"] is True
    assert pcie.result["inside"] == {"l40s-01": "host memory (SHM)"}
    from rich.console import Console

    from llmgw_core.script.steps.explain import render_explain

    console = Console(record=True, width=300)
    console.print(render_explain(pcie.result))
    assert "its cards talk over host memory (SHM)" in console.export_text()


def test_the_keys_example_answers_with_the_key_and_refuses_without(
    demo: Demo, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    from llmgw_core.script.runner import parse_script

    key = "sk-example-7e3c1f0a9b"
    monkeypatch.setenv("LLAMA_KEY", key)
    example = example_on_a_free_port(REPO / "examples" / "demo-keys.yaml", tmp_path)
    script = parse_script(example.read_text(), folder=example.parent, source=str(example))
    done = [(p.step.name, demo.loop.run(p.step.call(p.args, demo.ctx), 300)) for p in script.steps]
    names = ["serve", "ask", "ask", "bench", "gateway", "ask", "ask", "stop", "stop"]
    assert [name for name, _ in done] == names
    assert all(outcome.ok for _, outcome in done), [o.error for _, o in done]
    served, asked, refused, bench, fronted, through, turned_away = (o for _, o in done[:7])
    assert served.result["replica"]["api_key_env"] == "LLAMA_KEY"
    assert asked.result["text"] and refused.result["refused"] is True
    assert "it wants a key, and none was sent" in refused.result["why"]
    assert bench.result["completion_tokens"] > 0
    assert fronted.result["api_key_env"] == "LLAMA_KEY"
    assert through.result["text"] and turned_away.result["refused"] is True
    assert key not in json.dumps([outcome.result for _, outcome in done])
    # Without the variable the replica's key cannot be found, and serve says which it is.
    monkeypatch.delenv("LLAMA_KEY")
    with pytest.raises(
        Exception, match="the variable LLAMA_KEY holding the replica's key is not set"
    ):
        demo.loop.run(script.steps[0].step.call(script.steps[0].args, demo.ctx))
    assert demo.claims() == {}


def test_bench_for_a_duration_counts_what_failed_instead_of_stopping(
    demo: Demo, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("LLMGW_TIMED_KEY", "sk-timed-0123456789")
    served = demo.step(
        "serve", model="catalog:meta-llama/Llama-3.1-8B-Instruct", context=8192,
        gpu_class="l40s-48g", name="timed", api_key_env="LLMGW_TIMED_KEY",
    )  # fmt: skip
    assert served.ok, served.error
    try:
        timed = demo.step("bench", replica="timed", duration_s=1.5, concurrency=2).result
        assert timed["duration_s"] == 1.5 and timed["failed"] == 0
        assert timed["requests"] >= 2 and timed["wall_s"] >= 1.5
        # Every request refused (no key): not one answered, so the step fails with the 401.
        with pytest.raises(Exception, match=r"refused the request \(401\)"):
            demo.step("bench", replica="timed", requests=4, api_key_env="none")
    finally:
        demo.step("stop", replica="timed")


def test_a_replica_served_with_tool_calling_answers_the_openai_sdk_with_a_tool_call(demo: Demo):
    import openai

    from llmgw_core.serve.http import EngineReach, engine_tls

    served = _served(
        demo,
        model="catalog:meta-llama/Llama-3.1-8B-Instruct",
        context=8192,
        engine="vllm",
        gpu_class="l40s-48g",
        name="tools",
        engine_args={"enable_auto_tool_choice": True, "tool_call_parser": "hermes"},
    )
    replica = served["replica"]
    assert replica["engine_args"] == {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}
    argv = replica["shards"][0]["argv"]
    assert "--enable-auto-tool-choice" in argv
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    reach = EngineReach(demo.fleet)
    try:
        node, port = replica["endpoint"].rsplit(":", 1)
        tunnel = demo.loop.run(reach.tunnel(node, int(port), replica["http_host"]))
        # The engine speaks HTTPS with its replica's certificate, which a client pins.
        tls = engine_tls(replica["tls_cert"])
        assert tls is not None
        client = openai.OpenAI(
            base_url=tunnel.base(tls) + "/v1",
            api_key="unused",
            http_client=tunnel.sync_client(timeout=60, verify=tls.context()),
        )
        weather = {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
        answer = client.chat.completions.create(
            model="meta-llama/Llama-3.1-8B-Instruct",
            messages=[{"role": "user", "content": "The weather in Paris?"}],
            tools=[weather],
        )
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {
            "city": "sim"
        }
    finally:
        demo.loop.run(reach.close())
        demo.step("stop", replica="tools")


class Impostor:
    """Another user's process on the node: it binds a port and keeps every byte it is sent,
    answering each connection as a plain HTTP engine would."""

    def __init__(self, host: str, port: int, within_s: float = 5.0) -> None:
        import socket
        import threading
        import time

        deadline = time.monotonic() + within_s
        while True:
            try:
                self.listener = socket.create_server((host, port))
                break
            except OSError:
                assert time.monotonic() < deadline, f"port {port} never came free"
                time.sleep(0.005)
        self.received: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(2.0)
                data = b""
                try:
                    data = connection.recv(65536)
                    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                except OSError:
                    pass
                self.received.append(data)

    def close(self) -> None:
        self.listener.close()
        self._thread.join(5)


def test_a_process_that_binds_a_dead_engines_port_is_sent_no_request_and_no_key(
    demo: Demo, monkeypatch: pytest.MonkeyPatch
):
    import os
    import secrets
    import signal

    from llmgw_core.errors import LlmgwError
    from llmgw_core.serve.http import EngineReach, chat, engine_tls, health_status
    from llmgw_core.serve.loads import engine_metrics
    from llmgw_core.serve.replicas import find_replica

    key = f"sk-pinned-{secrets.token_hex(8)}"
    monkeypatch.setenv("LLMGW_PINNED_KEY", key)
    served = _served(
        demo, model="catalog:meta-llama/Llama-3.1-8B-Instruct", context=8192,
        gpu_class="l40s-48g", name="pinned", api_key_env="LLMGW_PINNED_KEY",
    )  # fmt: skip
    reach = EngineReach(demo.fleet)
    impostor = None
    try:
        assert served["replica"]["tls_cert"].startswith("-----BEGIN CERTIFICATE-----")
        assert demo.step("ask", replica="pinned", prompt="hello?").result["text"]
        # What a console holds between two refreshes: the replica, ready, and its pin.
        view = demo.loop.run(find_replica(demo.fleet, "pinned"))
        node, port, served_name = view.ready_engine()
        host, tls = view.http_host, engine_tls(view.tls_cert)
        path = str(view.spec["health_path"])
        assert demo.loop.run(health_status(reach, node, port, path, host, tls)) == 200
        assert demo.loop.run(engine_metrics(reach, view))  # its /metrics, pinned and keyed

        listed = demo.loop.run(demo.fleet.request(node, "shard.list"))["shards"]
        (shard,) = [s for s in listed if s["replica"] == "pinned" and s["phase"] == "running"]
        os.kill(shard["main_pid"], signal.SIGKILL)
        impostor = Impostor(host, port)

        assert demo.loop.run(health_status(reach, node, port, path, host, tls)) is None
        with pytest.raises(LlmgwError, match="did not answer"):
            demo.loop.run(chat(reach, node, port, served_name, "secret prompt", api_key=key,
                               host=host, tls=tls))  # fmt: skip
        assert demo.loop.run(engine_metrics(reach, view)) is None
        pinned = list(impostor.received)
        # Each call reached it, and each stopped at its hello (so did any health check of
        # the node's own that came by meanwhile: CI saw a fourth hello).
        assert len(pinned) >= 3, pinned
        for sent in pinned:
            assert sent[:1] == b"\x16"  # a TLS handshake record: the ClientHello, no more
            assert b"HTTP/1.1" not in sent and b"Authorization" not in sent
            assert key.encode() not in sent and b"secret prompt" not in sent

        # The same call unpinned, as every caller made it before: the key goes to the impostor.
        with pytest.raises(LlmgwError):
            demo.loop.run(chat(reach, node, port, served_name, "secret prompt", api_key=key,
                               host=host))  # fmt: skip
        assert f"Authorization: Bearer {key}".encode() in b"".join(impostor.received[len(pinned) :])
    finally:
        if impostor is not None:
            impostor.close()
        demo.loop.run(reach.close())
        demo.step("stop", replica="pinned")
