"""The rules that decide which ways a model may run, on shapes read from real configs."""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest

from llmgw_core.engines.planned import planned_argv
from llmgw_core.model.artifacts import Artifact
from llmgw_core.model.quantization import Quantization
from llmgw_core.planner.gpu_classes import gpu_class
from llmgw_core.planner.ways import (
    context_refusal,
    dtype_flag,
    engines_for,
    load_refusal,
    precision_rank_bits,
    quantization_flag,
    tensor_widths,
    uses_expert_parallel,
    width_refusal,
)


def _safetensors(shape, size_bytes: int = 10 * 2**30, quantization=None) -> Artifact:
    return Artifact(
        "original", "safetensors", ("model.safetensors",), size_bytes, None, quantization, shape
    )


def test_a_width_of_12_is_refused_for_8_kv_heads(real_shape):
    shape = real_shape("meta-llama--Llama-3.3-70B-Instruct")
    assert shape.num_kv_heads == 8
    assert tensor_widths(shape, 16) == (1, 2, 4, 8, 16)
    assert (
        width_refusal(shape, 12)
        == "a width of 12 neither divides the 8 KV heads nor is a multiple of them"
    )


def test_qwen3_235b_with_4_kv_heads_runs_8_wide(real_shape):
    shape = real_shape("Qwen--Qwen3-235B-A22B")
    assert shape.num_kv_heads == 4
    assert 8 in tensor_widths(shape, 8)
    assert width_refusal(shape, 8) is None


def test_a_width_must_divide_the_attention_heads(real_shape):
    shape = real_shape("Qwen--Qwen2.5-Coder-32B-Instruct")  # 40 heads, 8 KV heads
    assert tensor_widths(shape, 16) == (1, 2, 4, 8)
    assert width_refusal(shape, 16) == "a width of 16 does not divide the 40 attention heads"


def test_gptq_groups_must_stay_whole_on_each_card(real_shape):
    shape = real_shape("TheBloke--Genz-70b-GPTQ")  # 28672-wide MLP, groups of 128
    assert shape.quantization is not None and shape.quantization.group_size == 128
    assert tensor_widths(shape, 8, shape.quantization) == (1, 2, 4, 8)
    awq = Quantization(method="awq", bits=4.25, group_size=128)
    # Qwen2.5-72B's 29568-wide MLP is not whole groups of 128 even 2 wide; its AWQ
    # release pads the MLP to 29696, which is, up to 8 wide.
    qwen72 = real_shape("Qwen--Qwen2.5-72B")
    assert tensor_widths(qwen72, 8, awq) == (1,)
    assert "not whole groups of 128 awq weights" in width_refusal(qwen72, 8, awq)
    padded = replace(qwen72, intermediate_size=29696)
    assert tensor_widths(padded, 8, awq) == (1, 2, 4, 8)


def test_a_gguf_file_is_served_by_llama_cpp_and_safetensors_by_vllm_or_sglang(real_shape):
    shape = real_shape("meta-llama--Llama-3.1-8B-Instruct")
    gguf = Artifact(
        "Q4_K_M",
        "gguf",
        ("m-Q4_K_M.gguf",),
        4_920_000_000,
        None,
        Quantization("Q4_K_M", 4.85),
        shape,
    )
    assert engines_for(gguf) == ("llama.cpp",)
    assert engines_for(_safetensors(shape)) == ("vllm", "sglang")
    assert quantization_flag(gguf, "llama.cpp") is None


def test_precision_is_better_up_to_8_bits_and_no_better_past_it(real_shape):
    shape = real_shape("meta-llama--Llama-3.1-8B-Instruct")
    q8 = Artifact("Q8_0", "gguf", ("m.gguf",), 1, None, Quantization("Q8_0", 8.5), shape)
    q4 = Artifact("Q4_K_M", "gguf", ("m.gguf",), 1, None, Quantization("Q4_K_M", 4.85), shape)
    assert precision_rank_bits(_safetensors(shape), shape) == 8.0
    assert precision_rank_bits(q8, shape) == 8.0
    assert precision_rank_bits(q4, shape) == 4.85


def test_fp8_weights_are_never_offered_on_a_card_too_old_for_them(real_shape):
    shape = real_shape("Qwen--Qwen3-235B-A22B-FP8")
    fp8 = _safetensors(shape, quantization=shape.quantization)
    refusal = load_refusal("vllm", fp8, shape, gpu_class("t4-16g"))
    assert refusal is not None and refusal.startswith("fp8 weights need compute capability")
    assert load_refusal("vllm", fp8, shape, gpu_class("h100-80g")) is None


def test_vllm_runs_unquantised_weights_on_a_cpu_node_and_sglang_does_not(real_shape):
    shape = real_shape("meta-llama--Llama-3.1-8B-Instruct")
    assert load_refusal("vllm", _safetensors(shape), shape, None) is None
    assert "does not run on a CPU node" in load_refusal("sglang", _safetensors(shape), shape, None)


def test_a_bf16_model_on_a_t4_is_served_as_half(real_shape):
    shape = real_shape("meta-llama--Llama-3.1-8B-Instruct")
    assert dtype_flag("vllm", _safetensors(shape), shape, gpu_class("t4-16g")) == "half"
    assert dtype_flag("vllm", _safetensors(shape), shape, gpu_class("a100-80g")) is None


def test_experts_are_spread_only_for_a_mixture_on_more_than_one_card(real_shape):
    moe = real_shape("Qwen--Qwen3-235B-A22B")
    dense = real_shape("meta-llama--Llama-3.3-70B-Instruct")
    assert uses_expert_parallel("vllm", moe, 8)
    assert not uses_expert_parallel("vllm", moe, 1)
    assert not uses_expert_parallel("vllm", dense, 8)
    assert not uses_expert_parallel("llama.cpp", moe, 2)


def test_a_context_longer_than_the_model_was_trained_for_is_refused(real_shape):
    shape = real_shape("Qwen--Qwen3-235B-A22B")
    assert context_refusal(shape, 40960) is None
    assert context_refusal(shape, 131072) == (
        "a context of 131072 tokens is longer than the 40960 tokens the model was trained for"
    )


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (
            planned_argv(
                "vllm",
                "Qwen/Qwen3-235B-A22B",
                context=32768,
                tensor_parallel=8,
                expert_parallel=True,
                gpu_memory_utilization=0.9,
            ),
            "vllm serve Qwen/Qwen3-235B-A22B --served-model-name Qwen/Qwen3-235B-A22B"
            " --tensor-parallel-size 8 --pipeline-parallel-size 1 --max-model-len 32768"
            " --enable-expert-parallel --gpu-memory-utilization 0.90 --host 0.0.0.0 --port 8000"
            " --distributed-executor-backend mp",
        ),
        (
            planned_argv(
                "vllm",
                "org/m-AWQ",
                context=8192,
                tensor_parallel=2,
                pipeline_parallel=2,
                quantization_flag="awq_marlin",
                gpu_memory_utilization=0.9,
            ),
            "vllm serve org/m-AWQ --served-model-name org/m-AWQ --tensor-parallel-size 2"
            " --pipeline-parallel-size 2 --max-model-len 8192 --quantization awq_marlin"
            " --gpu-memory-utilization 0.90 --distributed-executor-backend mp --nnodes 2"
            " --node-rank 0 --master-addr HEAD_ADDRESS --master-port 29501 --host 0.0.0.0"
            " --port 8000",
        ),
        (
            planned_argv(
                "llama.cpp", "models/q/it's Q4_K_M.gguf", context=32768, concurrency=2, on_cpu=True
            ),
            "llama-server --model 'models/q/it'\"'\"'s Q4_K_M.gguf'"
            " --alias 'models/q/it'\"'\"'s Q4_K_M.gguf' --host 0.0.0.0 --port 8000"
            " --ctx-size 65536 --parallel 2 --n-gpu-layers 0 --metrics --flash-attn on",
        ),
        (
            planned_argv(
                "sglang",
                "Qwen/Qwen3-30B-A3B",
                context=8192,
                tensor_parallel=2,
                expert_parallel=True,
                gpu_memory_utilization=0.9,
            ),
            "python3 -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B"
            " --served-model-name Qwen/Qwen3-30B-A3B --host 0.0.0.0 --port 8000 --tp-size 2"
            " --ep-size 2 --context-length 8192 --mem-fraction-static 0.90",
        ),
    ],
)
def test_the_serve_command_uses_full_flag_names_and_quotes_every_value(argv, command):
    assert shlex.join(argv) == command
