"""Models read from a local stand-in for the Hub, through huggingface_hub and range requests."""

from __future__ import annotations

import json

import gguf
import pytest
from header_ggufs import write_tiny_llama
from hub_server import FakeRepo, repo_from_fixture

from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.model.source import load_model


def test_a_hub_repository_gives_its_shape_and_the_index_total_size(local_hub, models_dir):
    local_hub.repos["mistralai/Mixtral-8x7B-Instruct-v0.1"] = repo_from_fixture(
        models_dir / "mistralai--Mixtral-8x7B-Instruct-v0.1"
    )
    model = load_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert model.repo_id == "mistralai/Mixtral-8x7B-Instruct-v0.1"
    assert model.shape.num_experts == 8
    (original,) = model.artifacts
    assert original.format == "safetensors"
    assert original.size_bytes == 93_405_585_408
    # the consolidated.*.pt copies in the listing are not counted
    assert len(original.files) == 19 and all(f.endswith(".safetensors") for f in original.files)


def test_without_an_index_the_size_is_the_sum_of_the_safetensors_files(local_hub, models_dir):
    repo = repo_from_fixture(models_dir / "TheBloke--Genz-70b-GPTQ")
    local_hub.repos["TheBloke/Genz-70b-GPTQ"] = repo
    model = load_model("TheBloke/Genz-70b-GPTQ@main")
    assert model.revision == "main"
    (original,) = model.artifacts
    assert original.size_bytes == 36_652_345_792
    assert model.shape.quantization.method == "gptq"


def test_the_hubs_safetensors_parameter_count_is_kept(local_hub, models_dir):
    repo = repo_from_fixture(
        models_dir / "Qwen--Qwen2.5-Coder-32B-Instruct", safetensors_total=32_763_876_352
    )
    local_hub.repos["Qwen/Qwen2.5-Coder-32B-Instruct"] = repo
    (original,) = load_model("Qwen/Qwen2.5-Coder-32B-Instruct").artifacts
    assert original.param_count == 32_763_876_352
    assert original.size_bytes == 65_527_752_704


def test_modelopt_quantisation_is_read_from_hf_quant_config(local_hub, models_dir):
    local_hub.repos["nvidia/Llama-3.1-70B-Instruct-FP8"] = repo_from_fixture(
        models_dir / "nvidia--Llama-3.1-70B-Instruct-FP8"
    )
    model = load_model("nvidia/Llama-3.1-70B-Instruct-FP8")
    assert model.shape.quantization.method == "modelopt-fp8"
    # no weight files listed: the size is counted from the architecture at 8 bits
    assert model.artifacts[0].size_bytes / 2**30 == pytest.approx(67.7, abs=0.1)


def test_a_gguf_repository_lists_every_quantisation_and_reads_one_header_by_ranges(
    local_hub, tmp_path
):
    q8 = write_tiny_llama(
        tmp_path / "tiny-llama.Q8_0.gguf", layers=4, hidden=512, ffn=2048, vocab=32000
    )
    f16 = write_tiny_llama(tmp_path / "tiny-llama.F16.gguf", layers=4, hidden=512, ffn=2048,
                           vocab=32000, quant=gguf.GGMLQuantizationType.F16)  # fmt: skip
    local_hub.repos["test/tiny-llama-GGUF"] = FakeRepo(
        files={
            "config.json": b'{"model_type": "llama"}',
            "tiny-llama.Q8_0.gguf": q8,
            "tiny-llama.F16.gguf": f16,
            "README.md": b"tiny",
        }
    )
    model = load_model("test/tiny-llama-GGUF")
    by_name = {a.name: a for a in model.artifacts}
    assert set(by_name) == {"Q8_0", "F16"}
    assert by_name["Q8_0"].size_bytes == q8.stat().st_size
    assert model.shape.num_layers == 4 and model.shape.num_kv_heads == 2
    assert model.shape.vocab_size == 32000
    for artifact in model.artifacts:
        assert len(artifact.tensor_bytes_by_layer) == 4
    fetched = local_hub.log.bytes_for(".gguf")
    assert fetched < 2 * 2**20 < q8.stat().st_size
    assert all(rng for method, path, rng, _ in local_hub.log.requests if path.endswith(".gguf"))


def test_a_split_gguf_set_is_one_artifact_with_the_size_of_all_its_parts(local_hub, tmp_path):
    part = write_tiny_llama(tmp_path / "part.gguf")
    local_hub.repos["test/split-GGUF"] = FakeRepo(
        files={
            "big-q4_k_m-00001-of-00002.gguf": part,
            "big-q4_k_m-00002-of-00002.gguf": part,
        },
        sizes_only={"big-Q8_0.gguf": 123},
    )
    model = load_model("test/split-GGUF", read_gguf_headers=False)
    by_name = {a.name: a for a in model.artifacts}
    assert by_name["Q4_K_M"].files == (
        "big-q4_k_m-00001-of-00002.gguf",
        "big-q4_k_m-00002-of-00002.gguf",
    )
    assert by_name["Q4_K_M"].size_bytes == 2 * part.stat().st_size
    assert by_name["Q8_0"].size_bytes == 123
    assert model.shape is None  # no header read, and the repository has no config


def test_an_unknown_repository_is_one_sentence(local_hub):
    with pytest.raises(BadInput) as refused:
        load_model("nobody/no-such-model")
    assert refused.value.sentence() == (
        f"nobody/no-such-model is not a model repository on {local_hub.endpoint}: "
        "check the name; a private repository also needs HF_TOKEN"
    )


def test_a_gated_repository_without_a_token_says_it_needs_one_with_access(local_hub, models_dir):
    local_hub.repos["meta-llama/Llama-3.1-8B-Instruct"] = repo_from_fixture(
        models_dir / "meta-llama--Llama-3.1-8B-Instruct", gated_token="hf_right"
    )
    with pytest.raises(BadInput) as refused:
        load_model("meta-llama/Llama-3.1-8B-Instruct")
    assert "is a gated repository and this token has no access" in refused.value.sentence()
    with pytest.raises(BadInput, match="gated"):
        load_model("meta-llama/Llama-3.1-8B-Instruct", token="hf_wrong")
    model = load_model("meta-llama/Llama-3.1-8B-Instruct", token="hf_right")
    assert model.shape.num_layers == 32


def test_the_token_comes_from_hf_token_when_none_is_given(local_hub, models_dir, monkeypatch):
    local_hub.repos["meta-llama/Llama-3.1-8B-Instruct"] = repo_from_fixture(
        models_dir / "meta-llama--Llama-3.1-8B-Instruct", gated_token="hf_env"
    )
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    assert load_model("meta-llama/Llama-3.1-8B-Instruct").shape.hidden_size == 4096


def test_a_malformed_config_is_named_with_its_line(local_hub):
    local_hub.repos["test/broken"] = FakeRepo(files={"config.json": b'{"num_hidden_layers": 2,\n'})
    with pytest.raises(BadInput) as refused:
        load_model("test/broken")
    assert refused.value.message.startswith("config.json of test/broken is not valid JSON (line 2")


def test_a_repository_without_config_or_gguf_is_refused(local_hub):
    local_hub.repos["test/adapter"] = FakeRepo(files={"adapter_config.json": b"{}"})
    with pytest.raises(BadInput, match=r"has no config\.json and no GGUF file"):
        load_model("test/adapter")


def test_an_unsupported_architecture_is_named(local_hub):
    config = {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "num_hidden_layers": 64,
              "hidden_size": 2560}  # fmt: skip
    local_hub.repos["state-spaces/mamba-2.8b-hf"] = FakeRepo(
        files={"config.json": json.dumps(config).encode()}
    )
    with pytest.raises(BadInput) as refused:
        load_model("state-spaces/mamba-2.8b-hf")
    assert refused.value.sentence() == (
        "config.json of state-spaces/mamba-2.8b-hf: architecture MambaForCausalLM is not "
        "supported: it is a state-space model without a KV cache: llmgw plans decoder-only transformers"
    )


def test_offline_mode_reads_the_cache_and_names_what_is_missing(local_hub, models_dir, monkeypatch):
    local_hub.repos["mistralai/Mixtral-8x7B-Instruct-v0.1"] = repo_from_fixture(
        models_dir / "mistralai--Mixtral-8x7B-Instruct-v0.1"
    )
    online = load_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    served = len(local_hub.log.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = load_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert len(local_hub.log.requests) == served  # nothing asked of the server
    assert offline.shape == online.shape
    assert offline.artifacts[0].size_bytes == 93_405_585_408
    with pytest.raises(BadInput, match="not in the local Hugging Face cache"):
        load_model("Qwen/Qwen3-8B")


def test_a_gated_gguf_repository_reads_headers_only_with_a_token_that_has_access(
    local_hub, tmp_path
):
    q8 = write_tiny_llama(tmp_path / "gated.Q8_0.gguf")
    local_hub.repos["test/gated-GGUF"] = FakeRepo(
        files={"gated.Q8_0.gguf": q8}, gated_token="hf_ok"
    )
    with pytest.raises(BadInput) as refused:
        load_model("test/gated-GGUF")
    assert refused.value.message == (
        "test/gated-GGUF is a gated repository and this token cannot read gated.Q8_0.gguf"
    )
    model = load_model("test/gated-GGUF", token="hf_ok")
    assert model.shape.num_layers == 2
    assert model.artifacts[0].param_count is not None


def test_the_estimate_step_reads_a_hub_id_from_the_local_hub(
    local_hub, models_dir, tmp_path, capsys
):
    from llmgw_core.script.runner import run_script

    local_hub.repos["mistralai/Mixtral-8x7B-Instruct-v0.1"] = repo_from_fixture(
        models_dir / "mistralai--Mixtral-8x7B-Instruct-v0.1"
    )
    script = tmp_path / "estimate.yaml"
    script.write_text(
        "steps:\n  - estimate: {model: mistralai/Mixtral-8x7B-Instruct-v0.1, gpu: h100-80g,\n"
        "                tensor_parallel: 2, gpu_memory_utilization: 0.95, max_model_len: 8192}\n"
    )
    code = run_script(str(script), as_json=True, inventory=None, demo=False)
    line = json.loads(capsys.readouterr().out.strip())
    assert code == 0 and line["ok"]
    # vLLM v0.19 on H100 TP2 logged 43.51 GiB of weights and 465,936 tokens
    assert line["result"]["weights_gib"] == pytest.approx(43.51, abs=0.02)
    assert line["result"]["kv_cache_tokens"] == pytest.approx(465_936, rel=0.01)


def test_an_unknown_revision_is_named(local_hub, models_dir):
    local_hub.repos["Qwen/Qwen3-8B"] = repo_from_fixture(models_dir / "Qwen--Qwen3-8B")
    with pytest.raises(BadInput) as refused:
        load_model("Qwen/Qwen3-8B@v9")
    assert (
        refused.value.sentence()
        == "Qwen/Qwen3-8B has no revision 'v9': check the branch, tag or commit after @"
    )
    assert load_model("Qwen/Qwen3-8B@main").shape.num_layers == 36


def test_a_hub_that_refuses_connections_is_one_sentence(tmp_path, monkeypatch):
    import socket

    from huggingface_hub import constants

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{closed_port}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "2")
    with pytest.raises(LlmgwError) as refused:
        load_model("meta-llama/Llama-3.1-8B-Instruct")
    assert refused.value.sentence().startswith(
        f"cannot reach the Hub at {endpoint} for meta-llama/Llama-3.1-8B-Instruct"
    )
