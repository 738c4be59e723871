"""vLLM's finer rules: dtypes, online FP8, CUDA graph modes, hybrid groups, refusals, versions."""

from __future__ import annotations

import pytest

from llmgw_core.errors import BadInput
from llmgw_core.memory.kv_vllm import kv_groups
from llmgw_core.memory.vllm import default_batching, estimate, parse_version
from llmgw_core.model.params import count_parameters, weights_bytes_from_params

H100 = 79.19
H200 = 139.81


def _bytes(shape):
    return weights_bytes_from_params(count_parameters(shape), shape)


def test_a_float32_checkpoint_is_served_in_bfloat16_unless_float32_is_asked(model_shape):
    shape = model_shape("mattshumer--Reflection-Llama-3.1-70B")
    on_disk = 282_215_219_200  # index total_size: float32
    auto = estimate(shape, on_disk, gpu_memory_gib=H100, tensor_parallel=4, max_model_len=8192)
    wide = estimate(shape, on_disk, gpu_memory_gib=H100, tensor_parallel=4, max_model_len=8192,
                    dtype="float32")  # fmt: skip
    assert auto.weights_gib == pytest.approx(on_disk / 2 / 4 / 2**30, rel=0.01)
    assert wide.weights_gib == pytest.approx(2 * auto.weights_gib, rel=0.01)
    assert not wide.fits and "KV cache is needed" in wide.reason
    # float32 also doubles the KV bytes per token
    assert auto.kv_cache_tokens > 0


def test_online_fp8_halves_the_linear_layers_but_not_the_embeddings(model_shape):
    shape = model_shape("meta-llama--Llama-3.1-8B-Instruct")
    common = dict(gpu_memory_gib=H100, max_model_len=8192)
    bf16 = estimate(shape, 16_060_522_496, **common)
    fp8 = estimate(shape, 16_060_522_496, quantization="fp8", **common)
    embeddings_gib = 2 * 128256 * 4096 * 2 / 2**30
    linear_gib = bf16.weights_gib - embeddings_gib - 0.03125
    assert fp8.weights_gib == pytest.approx(embeddings_gib + linear_gib / 2 + 0.03125, rel=0.002)
    assert fp8.kv_cache_gib > bf16.kv_cache_gib


def test_another_quantization_flag_needs_a_checkpoint_quantised_that_way(model_shape):
    shape = model_shape("meta-llama--Llama-3.1-8B-Instruct")
    with pytest.raises(BadInput, match="--quantization awq needs a checkpoint quantised that way"):
        estimate(shape, 16_060_522_496, gpu_memory_gib=H100, quantization="awq")


def test_cuda_graphs_come_out_of_the_kv_budget_when_estimated(model_shape):
    shape = model_shape("meta-llama--Llama-3.1-8B-Instruct")
    common = dict(gpu_memory_gib=H100, gpu_memory_utilization=0.95, max_model_len=8192)
    outside = estimate(shape, 16_060_522_496, **common)
    inside = estimate(shape, 16_060_522_496, estimate_cuda_graphs=True, **common)
    assert not outside.cuda_graphs_in_budget and inside.cuda_graphs_in_budget
    assert outside.kv_cache_gib - inside.kv_cache_gib == pytest.approx(outside.cuda_graph_gib)
    eager = estimate(shape, 16_060_522_496, enforce_eager=True, **common)
    assert eager.cuda_graph_gib == 0


def test_graphs_outside_the_budget_can_still_overflow_the_card(model_shape):
    shape = model_shape("meta-llama--Llama-3.1-8B-Instruct")
    common = dict(gpu_memory_gib=H100, max_model_len=8192)
    graphs = estimate(shape, 16_060_522_496, gpu_memory_utilization=0.99, **common)
    assert not graphs.fits
    assert graphs.reason.startswith("CUDA out of memory while capturing CUDA graphs: 0.91 GiB")
    start = estimate(shape, 16_060_522_496, gpu_memory_utilization=0.995, **common)
    assert start.reason.startswith(
        "Free memory on device cuda:0 (78.68/79.19 GiB) on startup is less than desired GPU "
        "memory utilization (0.995, 78.79 GiB)."
    )


def test_later_versions_take_graphs_into_the_budget_and_older_ones_profile_more(model_shape):
    shape = model_shape("meta-llama--Llama-3.1-8B-Instruct")
    common = dict(gpu_memory_gib=H100, max_model_len=8192)
    assert estimate(shape, 16_060_522_496, engine_version="0.20.0", **common).cuda_graphs_in_budget
    old = estimate(shape, 16_060_522_496, engine_version="0.16.0", **common)
    new = estimate(shape, 16_060_522_496, engine_version="0.19.0", **common)
    assert old.activation_gib > new.activation_gib
    assert parse_version("v0.11.2+cu128") == (0, 11, 2)
    with pytest.raises(BadInput, match="is not a version number"):
        parse_version("latest")


def test_smaller_cards_get_smaller_batching_defaults():
    assert default_batching(79.19) == (8192, 1024)
    assert default_batching(23.58) == (2048, 256)


def test_llama4_scout_groups_twelve_full_and_thirty_six_chunked_layers(model_shape):
    shape = model_shape("meta-llama--Llama-4-Scout-17B-16E-Instruct")
    groups = kv_groups(list(shape.layer_attention))
    assert (groups.group_size, groups.groups) == (12, ("full", "chunked", "chunked", "chunked"))


def test_gpt_oss_pool_has_two_groups_of_eighteen(model_shape):
    shape = model_shape("openai--gpt-oss-120b")
    got = estimate(shape, _bytes(shape), gpu_memory_gib=H100, gpu_memory_utilization=0.95,
                   max_model_len=131072, max_num_batched_tokens=1024)  # fmt: skip
    assert got.kv_cache_groups == 2
    # 60 GiB of MXFP4 weights on one H100 leave a small pool (vllm#27508 logged 1.71 GiB)
    assert 0 < got.kv_cache_gib < 15


def test_disabling_the_hybrid_manager_sizes_sliding_layers_as_full(model_shape):
    shape = model_shape("google--gemma-3-27b-it")
    common = dict(gpu_memory_gib=H100, gpu_memory_utilization=0.95, max_model_len=32768)
    hybrid = estimate(shape, 54_864_813_280, **common)
    flat = estimate(shape, 54_864_813_280, hybrid_kv_cache_manager=False, **common)
    assert flat.kv_cache_groups == 1
    assert hybrid.max_concurrency > 2 * flat.max_concurrency


def test_a_context_past_the_trained_one_is_refused_as_vllm_does(model_shape):
    shape = model_shape("Qwen--Qwen2.5-Math-72B-Instruct")
    got = estimate(
        shape, 145_412_407_296, gpu_memory_gib=H200, tensor_parallel=2, max_model_len=8192
    )
    assert not got.fits
    assert got.reason.startswith(
        "User-specified max_model_len (8192) is greater than the derived max_model_len "
        "(max_position_embeddings=4096 in model's config.json)."
    )


def test_a_width_that_does_not_divide_the_heads_is_an_answer_in_vllms_words(model_shape):
    shape = model_shape("meta-llama--Llama-3.1-8B-Instruct")
    got = estimate(
        shape, 16_060_522_496, gpu_memory_gib=H100, tensor_parallel=3, max_model_len=8192
    )
    assert not got.fits
    assert got.reason == (
        "Total number of attention heads (32) must be divisible by tensor parallel size (3)."
    )


def test_deepseek_v3_fp8_on_eight_h200_keeps_a_replicated_latent(model_shape):
    shape = model_shape("deepseek-ai--DeepSeek-V3")
    got = estimate(shape, 688_586_727_753, gpu_memory_gib=H200, tensor_parallel=8,
                   gpu_memory_utilization=0.9, max_model_len=32768)  # fmt: skip
    assert got.fits
    # the MTP layer is in the files but not loaded: 671 of 682.6 B parameters
    assert got.weights_gib == pytest.approx(688_586_727_753 / 2**30 / 8 * 671.0 / 682.6, rel=0.02)
    bytes_per_token = 61 * 576 * 2
    assert got.kv_cache_tokens == pytest.approx(
        got.kv_cache_gib * 2**30 / bytes_per_token, rel=0.001
    )


def test_gpt_oss_120b_mxfp4_experts_are_padded_to_256_wide_on_load(model_shape):
    shape = model_shape("openai--gpt-oss-120b")
    got = estimate(shape, _bytes(shape), gpu_memory_gib=H100, gpu_memory_utilization=0.95,
                   max_model_len=8192)  # fmt: skip
    # vllm#33155 (v0.14.1, Triton): "Model loading took 64.38 GiB"; checkpoint ≈ 60.8 GiB
    assert _bytes(shape) / 2**30 == pytest.approx(60.8, abs=0.1)
    assert got.weights_gib == pytest.approx(64.38, rel=0.01)
    # no fused-MoE workspace for MXFP4: the sampler's 1024 × 201,088 × 16 bytes alone (2.87 measured)
    assert got.activation_gib == pytest.approx(2.87, abs=0.25)


def test_llama4_scout_carries_a_rotary_cache_for_ten_million_positions(model_shape):
    shape = model_shape("meta-llama--Llama-4-Scout-17B-16E-Instruct")
    got = estimate(shape, _bytes(shape), gpu_memory_gib=H100, tensor_parallel=4,
                   gpu_memory_utilization=0.95, max_model_len=8192)  # fmt: skip
    assert got.weights_gib == pytest.approx(53.12, rel=0.015)  # v0.19 sweep, TP4
    assert got.activation_gib == pytest.approx(3.19, abs=0.25)


def test_qwen3_at_width_5_fails_on_the_vocabulary_as_the_sweep_logged(model_shape):
    shape = model_shape("Qwen--Qwen3-8B")  # same 151,936 vocabulary as Qwen3-14B
    got = estimate(shape, _bytes(shape), gpu_memory_gib=H100, tensor_parallel=5, max_model_len=8192)
    assert not got.fits
    # 32 heads / 5 fails first for Qwen3-8B; the 40-head Qwen3-14B reaches the KV and vocab checks
    assert "must be divisible by tensor parallel size (5)" in got.reason


def test_kv_heads_and_width_must_divide_one_another(model_shape):
    from dataclasses import replace

    shape = replace(model_shape("Qwen--Qwen3-8B"), num_attention_heads=40)
    got = estimate(shape, _bytes(shape), gpu_memory_gib=H100, tensor_parallel=5, max_model_len=8192)
    assert got.reason.startswith(
        "Total number of KV heads (8) must be divisible by tensor parallel size (5)"
    )
    eight_kv = replace(shape, num_kv_heads=10)
    assert estimate(eight_kv, _bytes(shape), gpu_memory_gib=H100, tensor_parallel=5,
                    max_model_len=8192).reason == "151936 is not divisible by 5"  # fmt: skip
