"""The `estimate` step through the headless runner: vLLM's, SGLang's and llama.cpp's figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from header_ggufs import write_tiny_llama

from llmgw_core.script.runner import run_script


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *, as_json: bool = True):
    script = tmp_path / "script.yaml"
    script.write_text(text, encoding="utf-8")
    code = run_script(str(script), as_json=as_json, inventory=None, demo=False)
    out, _ = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines() if line.strip()] if as_json else out


def test_llama_8b_on_one_h100_prints_vllms_figures(tmp_path, capsys, models_dir):
    model = models_dir / "meta-llama--Llama-3.1-8B-Instruct"
    code, lines = _run(
        tmp_path,
        capsys,
        f"""steps:
  - estimate: {{model: {model}, engine: vllm, gpu: h100-80g, gpu_memory_utilization: 0.95,
                max_model_len: 8192, engine_version: "0.19.0"}}
""",
    )
    assert code == 0
    result = lines[0]["result"]
    assert lines[0]["ok"] is True and result["fits"] is True
    assert result["gpu_memory_gib"] == 79.19
    assert result["weights_gib"] == 14.99
    assert result["kv_cache_gib"] == pytest.approx(58.11, abs=0.6)
    assert result["kv_cache_tokens"] == pytest.approx(476_016, rel=0.01)
    assert result["max_concurrency"] == pytest.approx(58.11, rel=0.01)
    for key in ("activation_gib", "non_torch_gib", "cuda_graph_gib"):
        assert 0 < result[key] < 3


def test_a_layout_that_does_not_fit_is_an_answer_with_vllms_reason(tmp_path, capsys, models_dir):
    model = models_dir / "meta-llama--Llama-3.1-8B-Instruct"
    code, lines = _run(
        tmp_path,
        capsys,
        f"""steps:
  - estimate: {{model: {model}, gpu_memory_gib: 23.58, max_model_len: 131072}}
""",
    )
    assert code == 0
    result = lines[0]["result"]
    assert lines[0]["ok"] is True and result["fits"] is False
    assert result["reason"].startswith(
        "To serve at least one request with the model's max seq len (131072), "
        "(16.00 GiB KV cache is needed, which is larger than the available KV cache memory ("
    )
    assert "the estimated maximum model length is" in result["reason"]


def test_weights_larger_than_the_card_say_so(tmp_path, capsys, models_dir):
    model = models_dir / "meta-llama--Llama-3.1-70B-Instruct"
    code, lines = _run(
        tmp_path,
        capsys,
        f"""steps:
  - estimate: {{model: {model}, gpu: h100-80g, max_model_len: 8192}}
""",
    )
    assert code == 0 and lines[0]["result"]["fits"] is False
    assert "CUDA out of memory while loading the weights" in lines[0]["result"]["reason"]


def test_sglang_pool_for_qwen3_235b_fp8(tmp_path, capsys, models_dir):
    model = models_dir / "Qwen--Qwen3-235B-A22B-FP8"
    code, lines = _run(
        tmp_path,
        capsys,
        f"""steps:
  - estimate: {{model: {model}, engine: sglang, gpu: h100-80g, tensor_parallel: 4,
                gpu_memory_utilization: 0.93, max_model_len: 32768}}
""",
    )
    assert code == 0
    assert lines[0]["result"]["kv_cache_tokens"] == pytest.approx(367_404, rel=0.01)
    assert lines[0]["result"]["fits"] is True


def test_llama_cpp_on_a_local_gguf(tmp_path, capsys):
    gguf_file = write_tiny_llama(tmp_path / "tiny.Q8_0.gguf", layers=4, kv_heads=2, hidden=64)
    code, lines = _run(
        tmp_path,
        capsys,
        f"""steps:
  - estimate: {{model: {gguf_file}, engine: llama.cpp, gpu_memory_gib: 8, max_model_len: 1000}}
""",
    )
    assert code == 0
    result = lines[0]["result"]
    assert result["artifact"] == "Q8_0"
    assert result["kv_cache_tokens"] == 1024  # 1000 cells padded to 256
    # 4 layers × 1024 cells × 2 × 2 heads × 16 × 2 bytes
    assert result["kv_cache_gib"] == round(4 * 1024 * 2 * 2 * 16 * 2 / 2**30, 2)
    assert result["fits"] is True


def test_vllm_on_a_gguf_only_model_points_at_llama_cpp(tmp_path, capsys):
    gguf_file = write_tiny_llama(tmp_path / "tiny.Q8_0.gguf")
    code, lines = _run(
        tmp_path,
        capsys,
        f"""steps:
  - estimate: {{model: {gguf_file}, engine: vllm, gpu_memory_gib: 8}}
""",
    )
    assert code == 2
    assert lines[0]["error"].endswith(
        "has no safetensors weights for vllm: use engine llama.cpp for its GGUF files"
    )


def test_an_unknown_gpu_class_is_refused_before_anything_runs(tmp_path, capsys):
    code, lines = _run(tmp_path, capsys, "steps:\n  - estimate: {model: x/y, gpu: h900-1t}\n")
    assert code == 2 and lines[0]["step"] is None
    assert "line 2: step 'estimate': gpu" in lines[0]["error"]


def test_both_memory_sources_are_refused(tmp_path, capsys):
    code, lines = _run(tmp_path, capsys,
                       "steps:\n  - estimate: {model: x/y, gpu: h100-80g, gpu_memory_gib: 80}\n")  # fmt: skip
    assert code == 2
    assert "give gpu_memory_gib or gpu, not both" in lines[0]["error"]


def test_the_table_for_people_shows_the_figures(tmp_path, capsys, models_dir):
    model = models_dir / "Qwen--Qwen3-30B-A3B"
    code, out = _run(tmp_path, capsys, f"""steps:
  - estimate: {{model: {model}, gpu: h100-80g, gpu_memory_utilization: 0.95, max_model_len: 8192}}
""", as_json=False)  # fmt: skip
    assert code == 0
    assert "KV cache tokens" in out and "weights GiB" in out and "56.88" in out


def test_llama_cpp_on_a_cpu_node_counts_ram(tmp_path, capsys):
    gguf_file = write_tiny_llama(tmp_path / "tiny.Q8_0.gguf", layers=4, kv_heads=2, hidden=64)
    code, lines = _run(
        tmp_path,
        capsys,
        f"""steps:
  - estimate: {{model: {gguf_file}, engine: llama.cpp, gpu_memory_gib: 64, cpu: true,
                max_model_len: 1000, concurrency: 2}}
""",
    )
    result = lines[0]["result"]
    assert code == 0 and result["fits"] is True
    assert result["host_weights_gib"] == 0 and result["non_torch_gib"] == 0
    assert result["kv_cache_gib"] == round(2 * 4 * 1024 * 2 * 2 * 16 * 2 / 2**30, 2)
