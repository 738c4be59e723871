"""vLLM's own start-up figures reproduced from the model's facts alone.

Measured values: the llm-d planner accuracy sweep, vLLM v0.19.0 on H100-80GB
(79.19 GiB), `--max-model-len 8192 --gpu-memory-utilization 0.95`, see
../shared/research/model-memory.md §2a. Weights and KV must land within 1 %,
the other terms within a few hundredths to tenths of a GiB.
"""

from __future__ import annotations

import pytest
from published_shapes import DEEPSEEK_V2_LITE

from llmgw_core.memory.vllm import estimate
from llmgw_core.model.params import count_parameters, weights_bytes_from_params
from llmgw_core.model.shape import shape_from_config

H100 = 79.19
LLAMA_8B_BYTES = 16_060_522_496  # model.safetensors.index.json total_size
MIXTRAL_BYTES = 93_405_585_408  # fixture index total_size
GEMMA3_27B_BYTES = 54_864_813_280  # medgemma-27b-it index (same tensor shapes as gemma-3-27b-it)

# name, fixture dir, weights bytes (None = counted from the architecture), TP, PP,
# measured: weights, activation, non-torch, KV GiB, KV tokens, max concurrency
MEASURED = [
    ("llama8b-tp1", "meta-llama--Llama-3.1-8B-Instruct", LLAMA_8B_BYTES, 1, 1,
     (14.99, 1.89, 0.25, 58.11, 476_016, 58.11)),
    ("llama8b-tp2", "meta-llama--Llama-3.1-8B-Instruct", LLAMA_8B_BYTES, 2, 1,
     (7.51, 1.89, 2.07, 63.76, 1_044_688, 127.53)),
    ("llama8b-tp4", "meta-llama--Llama-3.1-8B-Instruct", LLAMA_8B_BYTES, 4, 1,
     (3.77, 1.89, 2.13, 67.44, 2_209_792, 269.75)),
    ("llama8b-pp2", "meta-llama--Llama-3.1-8B-Instruct", LLAMA_8B_BYTES, 1, 2,
     (7.51, 1.10, 0.07, 66.54, 1_075_312, 131.26)),
    ("llama8b-pp4", "meta-llama--Llama-3.1-8B-Instruct", LLAMA_8B_BYTES, 1, 4,
     (4.26, 1.05, 0.07, 69.80, 2_257_264, 275.54)),
    ("qwen3-30b-a3b", "Qwen--Qwen3-30B-A3B", None, 1, 1,
     (56.88, 2.68, 0.27, 15.41, 168_288, 20.54)),
    ("mixtral-tp2", "mistralai--Mixtral-8x7B-Instruct-v0.1", MIXTRAL_BYTES, 2, 1,
     (43.51, 1.21, 2.07, 28.44, 465_936, 56.88)),
    ("gemma3-27b", "google--gemma-3-27b-it", GEMMA3_27B_BYTES, 1, 1,
     (51.45, 3.99, 0.26, 19.53, 36_560, 4.46)),
    ("deepseek-v2-lite", None, None, 1, 1,
     (29.43, 1.93, 0.26, 43.61, 1_505_552, 183.78)),
]  # fmt: skip


def _shape(models_dir, directory):
    if directory is None:
        return shape_from_config(DEEPSEEK_V2_LITE)
    import json

    return shape_from_config(json.loads((models_dir / directory / "config.json").read_text()))


@pytest.mark.parametrize(
    ("name", "directory", "weights_bytes", "tp", "pp", "measured"),
    MEASURED,
    ids=[row[0] for row in MEASURED],
)
def test_vllm_v019_startup_lines_are_predicted_within_one_percent(
    models_dir, name, directory, weights_bytes, tp, pp, measured
):
    shape = _shape(models_dir, directory)
    if weights_bytes is None:
        weights_bytes = weights_bytes_from_params(count_parameters(shape), shape)
    got = estimate(
        shape,
        weights_bytes,
        gpu_memory_gib=H100,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        gpu_memory_utilization=0.95,
        max_model_len=8192,
        engine_version="0.19.0",
    )
    weights, activation, non_torch, kv_gib, kv_tokens, concurrency = measured
    print(
        f"{name:18s} weights {got.weights_gib:6.2f}/{weights:6.2f}  act {got.activation_gib:4.2f}/"
        f"{activation:4.2f}  kv {got.kv_cache_gib:6.2f}/{kv_gib:6.2f}  tokens "
        f"{got.kv_cache_tokens:>9,}/{kv_tokens:>9,}  conc {got.max_concurrency:6.2f}/{concurrency}"
    )
    assert got.fits
    assert got.weights_gib == pytest.approx(weights, rel=0.01)
    assert got.activation_gib == pytest.approx(activation, abs=0.25)
    assert got.non_torch_gib == pytest.approx(non_torch, abs=0.05)
    assert got.kv_cache_gib == pytest.approx(kv_gib, rel=0.015)
    assert got.kv_cache_tokens == pytest.approx(kv_tokens, rel=0.015)
    assert got.max_concurrency == pytest.approx(concurrency, rel=0.015)


def test_llama_8b_on_one_h100_loads_14_99_gib_from_a_14_96_gib_checkpoint(models_dir):
    shape = _shape(models_dir, "meta-llama--Llama-3.1-8B-Instruct")
    got = estimate(shape, LLAMA_8B_BYTES, gpu_memory_gib=H100, gpu_memory_utilization=0.95,
                   max_model_len=8192)  # fmt: skip
    assert pytest.approx(14.96, abs=0.005) == LLAMA_8B_BYTES / 2**30
    # the 32 MiB rotary cache (131,072 positions × 128 × bf16) is the whole difference
    assert round(got.weights_gib, 2) == 14.99
    assert round(got.requested_gib, 2) == 75.23


def test_measured_budget_gives_the_logged_token_count_exactly(models_dir):
    """With vLLM's own non-KV figures, the pool arithmetic lands on the logged tokens."""
    from llmgw_core.memory.kv_vllm import kv_pool

    shape = _shape(models_dir, "meta-llama--Llama-3.1-8B-Instruct")
    pool = kv_pool(shape, range(32), available_bytes=int(58.11 * 2**30), tensor_parallel=1,
                   max_model_len=8192, max_num_batched_tokens=8192, kv_cache_dtype=None,
                   serve_dtype="bfloat16")  # fmt: skip
    assert pool.num_blocks == 29_752  # the log: 29,751 (58.11 is itself rounded)
    assert pool.reported_tokens == pytest.approx(476_016, abs=16)


def test_gemma3_hybrid_pool_reports_blocks_per_group_not_bytes_per_token(models_dir):
    from llmgw_core.memory.kv_vllm import kv_groups, kv_pool

    shape = _shape(models_dir, "google--gemma-3-27b-it")
    groups = kv_groups(list(shape.layer_attention))
    assert (groups.group_size, len(groups.groups), groups.padding_layers) == (10, 7, 8)
    pool = kv_pool(shape, range(62), available_bytes=15_997 * 131_072 * 10, tensor_parallel=1,
                   max_model_len=8192, max_num_batched_tokens=8192, kv_cache_dtype=None,
                   serve_dtype="bfloat16")  # fmt: skip
    assert pool.num_blocks == 15_997
    assert pool.reported_tokens == 36_560
    assert pool.pages_per_request == 512 + 6 * 513
    assert round(pool.max_concurrency, 2) == 4.46


def test_fp8_kv_cache_doubles_the_tokens_of_the_same_pool(models_dir):
    shape = _shape(models_dir, "meta-llama--Llama-3.1-8B-Instruct")
    common = dict(gpu_memory_gib=H100, gpu_memory_utilization=0.95, max_model_len=8192)
    auto = estimate(shape, LLAMA_8B_BYTES, **common)
    fp8 = estimate(shape, LLAMA_8B_BYTES, kv_cache_dtype="fp8", **common)
    assert fp8.kv_cache_gib == pytest.approx(auto.kv_cache_gib)
    assert fp8.kv_cache_tokens == pytest.approx(2 * auto.kv_cache_tokens, abs=16)


def test_mla_latent_is_replicated_on_every_tensor_rank():
    shape = shape_from_config(DEEPSEEK_V2_LITE)
    from llmgw_core.memory.kv_vllm import page_bytes

    assert page_bytes(shape, 1, None, "bfloat16") == 16 * 576 * 2
    assert page_bytes(shape, 8, None, "bfloat16") == 16 * 576 * 2
    assert page_bytes(shape, 1, "fp8_ds_mla", "bfloat16") == 16 * 656
