"""Every real config.json in ../shared/fixtures/models read into the right shape.

Expected values are the ones the model cards and model-memory.md state; the
configs are read in place.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmgw_core.errors import BadInput
from llmgw_core.model.params import count_parameters
from llmgw_core.model.shape import is_full_config, shape_from_config

# dir: (layers, hidden, heads, kv heads, head_dim, vocab, max context, dtype,
#       experts, top-k, (full, sliding, chunked) layers, window, chunk,
#       quantisation method, tied, parameters in billions)
EXPECTED = {
    "meta-llama--Llama-3.1-8B-Instruct": (32, 4096, 32, 8, 128, 128256, 131072, "bfloat16", None, None, (32, 0, 0), None, None, None, False, 8.03),
    "meta-llama--Llama-3.1-70B-Instruct": (80, 8192, 64, 8, 128, 128256, 131072, "bfloat16", None, None, (80, 0, 0), None, None, None, False, 70.55),
    "meta-llama--Llama-3.3-70B-Instruct": (80, 8192, 64, 8, 128, 128256, 131072, "bfloat16", None, None, (80, 0, 0), None, None, None, False, 70.55),
    "meta-llama--Meta-Llama-3.1-405B": (126, 16384, 128, 8, 128, 128256, 131072, "bfloat16", None, None, (126, 0, 0), None, None, None, False, 405.85),
    "mattshumer--Reflection-Llama-3.1-70B": (80, 8192, 64, 8, 128, 128262, 8192, "float32", None, None, (80, 0, 0), None, None, None, False, 70.55),
    "meta-llama--Llama-4-Scout-17B-16E-Instruct": (48, 5120, 40, 8, 128, 202048, 10485760, "bfloat16", 16, 1, (12, 0, 36), None, 8192, None, False, 107.77),
    "Qwen--Qwen2.5-7B-Instruct": (28, 3584, 28, 4, 128, 152064, 32768, "bfloat16", None, None, (28, 0, 0), None, None, None, False, 7.62),
    "Qwen--Qwen2.5-32B-Instruct": (64, 5120, 40, 8, 128, 152064, 131072, "bfloat16", None, None, (64, 0, 0), None, None, None, False, 32.76),
    "Qwen--Qwen2.5-Coder-32B-Instruct": (64, 5120, 40, 8, 128, 152064, 32768, "bfloat16", None, None, (64, 0, 0), None, None, None, False, 32.76),
    "Qwen--Qwen2.5-72B": (80, 8192, 64, 8, 128, 152064, 131072, "bfloat16", None, None, (80, 0, 0), None, None, None, False, 72.71),
    "Qwen--Qwen2.5-Math-72B-Instruct": (80, 8192, 64, 8, 128, 152064, 4096, "bfloat16", None, None, (80, 0, 0), None, None, None, False, 72.71),
    "Qwen--Qwen3-8B": (36, 4096, 32, 8, 128, 151936, 40960, "bfloat16", None, None, (36, 0, 0), None, None, None, False, 8.19),
    "Qwen--Qwen3-30B-A3B": (48, 2048, 32, 4, 128, 151936, 40960, "bfloat16", 128, 8, (48, 0, 0), None, None, None, False, 30.53),
    "Qwen--Qwen3-235B-A22B": (94, 4096, 64, 4, 128, 151936, 40960, "bfloat16", 128, 8, (94, 0, 0), None, None, None, False, 235.09),
    "Qwen--Qwen3-235B-A22B-FP8": (94, 4096, 64, 4, 128, 151936, 40960, "bfloat16", 128, 8, (94, 0, 0), None, None, "fp8", False, 235.09),
    "deepseek-ai--DeepSeek-V3": (61, 7168, 128, 128, 192, 129280, 163840, "bfloat16", 256, 8, (61, 0, 0), None, None, "fp8", False, 671.03),
    "deepseek-ai--DeepSeek-R1": (61, 7168, 128, 128, 192, 129280, 163840, "bfloat16", 256, 8, (61, 0, 0), None, None, "fp8", False, 671.03),
    "mistralai--Mixtral-8x7B-Instruct-v0.1": (32, 4096, 32, 8, 128, 32000, 32768, "bfloat16", 8, 2, (32, 0, 0), None, None, None, False, 46.70),
    "google--gemma-3-27b-it": (62, 5376, 32, 16, 128, 262208, 131072, "bfloat16", None, None, (10, 52, 0), 1024, None, None, True, 27.01),
    "google--medgemma-27b-it": (62, 5376, 32, 16, 128, 262208, 131072, "bfloat16", None, None, (10, 52, 0), 1024, None, None, True, 27.01),
    "openai--gpt-oss-120b": (36, 2880, 64, 8, 64, 201088, 131072, "bfloat16", 128, 4, (18, 18, 0), 128, None, "mxfp4", False, 116.83),
    "openai--gpt-oss-20b": (24, 2880, 64, 8, 64, 201088, 131072, "bfloat16", 32, 4, (12, 12, 0), 128, None, "mxfp4", False, 20.91),
    "moonshotai--Kimi-K2.5": (61, 7168, 64, 64, 192, 163840, 262144, "bfloat16", 384, 8, (61, 0, 0), None, None, "compressed-tensors", False, 1026.41),
    "nvidia--Llama-3.1-70B-Instruct-FP8": (80, 8192, 64, 8, 128, 128256, 131072, "bfloat16", None, None, (80, 0, 0), None, None, "modelopt-fp8", False, 70.55),
    "TheBloke--Genz-70b-GPTQ": (80, 8192, 64, 8, 128, 32000, 4096, "bfloat16", None, None, (80, 0, 0), None, None, "gptq", False, 68.98),
}  # fmt: skip

STUB_CONFIGS = {"TheBloke--Mistral-7B-Instruct-v0.2-GGUF"}


def _read(directory: Path):
    config = json.loads((directory / "config.json").read_text())
    extra = {
        name: json.loads((directory / name).read_text())
        for name in ("hf_quant_config.json", "quantize_config.json")
        if (directory / name).exists()
    }
    return config, extra


def test_every_fixture_config_has_an_expected_shape(models_dir):
    with_config = {d.name for d in models_dir.iterdir() if (d / "config.json").exists()}
    assert with_config == set(EXPECTED) | STUB_CONFIGS


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_config_reads_into_its_published_shape(models_dir, name):
    config, extra = _read(models_dir / name)
    shape = shape_from_config(config, extra_files=extra)
    (layers, hidden, heads, kv, head_dim, vocab, context, dtype, experts, top_k, pattern,
     window, chunk, quant, tied, billions) = EXPECTED[name]  # fmt: skip
    assert (shape.num_layers, shape.hidden_size, shape.num_attention_heads) == (
        layers,
        hidden,
        heads,
    )
    assert (shape.num_kv_heads, shape.head_dim, shape.vocab_size) == (kv, head_dim, vocab)
    assert (shape.max_context, shape.dtype) == (context, dtype)
    assert (shape.num_experts, shape.experts_per_token) == (experts, top_k)
    assert (
        shape.count_layers("full"),
        shape.count_layers("sliding"),
        shape.count_layers("chunked"),
    ) == pattern
    assert (shape.sliding_window, shape.attention_chunk_size) == (window, chunk)
    assert (shape.quantization.method if shape.quantization else None) == quant
    assert shape.tie_word_embeddings is tied
    assert count_parameters(shape).main / 1e9 == pytest.approx(billions, abs=0.01)


def test_a_gguf_repositorys_stub_config_is_not_a_full_config(models_dir):
    config, _ = _read(models_dir / "TheBloke--Mistral-7B-Instruct-v0.2-GGUF")
    assert config == {"model_type": "mistral"}
    assert not is_full_config(config)
    with pytest.raises(BadInput) as refused:
        shape_from_config(config)
    assert refused.value.sentence() == (
        "config.json of mistral has no num_hidden_layers: "
        "it is not a full model config (a GGUF repository's stub?)"
    )


def test_qwen25_keeps_full_attention_when_use_sliding_window_is_false(models_dir):
    config, _ = _read(models_dir / "Qwen--Qwen2.5-Math-72B-Instruct")
    assert config["sliding_window"] == 4096 and config["use_sliding_window"] is False
    shape = shape_from_config(config)
    assert shape.sliding_window is None
    assert set(shape.layer_attention) == {"full"}


def test_gemma3_minimal_text_config_takes_the_architecture_defaults(models_dir):
    config, _ = _read(models_dir / "google--gemma-3-27b-it")
    assert "vocab_size" not in config["text_config"]
    shape = shape_from_config(config)
    assert shape.vocab_size == 262208 and shape.max_context == 131072
    # every 6th layer is global: layers 5, 11, ..., 59
    assert [i for i, kind in enumerate(shape.layer_attention) if kind == "full"] == list(
        range(5, 62, 6)
    )
    assert shape.multimodal


def test_medgemma_layer_types_agree_with_the_gemma3_pattern_default(models_dir):
    expanded = shape_from_config(_read(models_dir / "google--medgemma-27b-it")[0])
    minimal = shape_from_config(_read(models_dir / "google--gemma-3-27b-it")[0])
    assert expanded.layer_attention == minimal.layer_attention


def test_llama4_scout_chunks_three_of_four_layers(models_dir):
    shape = shape_from_config(_read(models_dir / "meta-llama--Llama-4-Scout-17B-16E-Instruct")[0])
    assert shape.layer_attention[:4] == ("chunked", "chunked", "chunked", "full")
    assert shape.num_shared_experts == 1 and shape.moe_intermediate_size == 8192


def test_gpt_oss_alternates_sliding_and_full_layers_from_layer_types(models_dir):
    shape = shape_from_config(_read(models_dir / "openai--gpt-oss-120b")[0])
    assert shape.layer_attention[:2] == ("sliding", "full")
    assert shape.quantization.bits == 4.25 and shape.quantization.experts_only


def test_deepseek_v3_is_mla_with_a_576_wide_latent_and_one_mtp_layer(models_dir):
    shape = shape_from_config(_read(models_dir / "deepseek-ai--DeepSeek-V3")[0])
    assert shape.mla is not None and shape.mla.latent_width == 576 and shape.kv_head_dim == 576
    assert shape.moe_layers[:4] == (False, False, False, True)
    params = count_parameters(shape)
    assert params.main / 1e9 == pytest.approx(671.0, abs=0.1)
    assert params.mtp / 1e9 == pytest.approx(11.6, abs=0.2)


def test_kimi_compressed_tensors_keeps_attention_and_shared_experts_in_16_bit(models_dir):
    shape = shape_from_config(_read(models_dir / "moonshotai--Kimi-K2.5")[0])
    quant = shape.quantization
    assert (quant.method, quant.bits, quant.group_size) == ("compressed-tensors", 4.5, 32)
    assert quant.keeps_attention and quant.keeps_dense_mlp
    assert shape.dtype == "bfloat16"  # from `dtype`, not `torch_dtype`


def test_modelopt_fp8_is_read_from_hf_quant_config(models_dir):
    config, extra = _read(models_dir / "nvidia--Llama-3.1-70B-Instruct-FP8")
    assert "quantization_config" not in config
    assert shape_from_config(config).quantization is None
    quant = shape_from_config(config, extra_files=extra).quantization
    assert (quant.method, quant.bits, quant.kv_cache_dtype) == ("modelopt-fp8", 8.0, "fp8")
    assert quant.min_compute_capability == 8.9


def test_gptq_four_bit_groups_of_128_cost_4_16_bits_a_weight(models_dir):
    quant = shape_from_config(_read(models_dir / "TheBloke--Genz-70b-GPTQ")[0]).quantization
    assert quant.bits == pytest.approx(4 + 20 / 128)
    assert quant.vllm_flag is None


def test_fp8_block_checkpoints_need_no_quantization_flag(models_dir):
    quant = shape_from_config(_read(models_dir / "Qwen--Qwen3-235B-A22B-FP8")[0]).quantization
    assert (quant.method, quant.vllm_flag, quant.min_compute_capability) == ("fp8", None, 8.0)
    assert "Marlin" in quant.note
