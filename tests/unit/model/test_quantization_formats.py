"""Quantisation formats recognised from their config blocks, with the bits a weight really costs."""

from __future__ import annotations

import pytest

from llmgw_core.errors import BadInput
from llmgw_core.model.quantization import online_fp8, quantization_from_config


def _read(block):
    return quantization_from_config({"quantization_config": block}, {}, {})


def test_awq_four_bit_groups_of_128_with_zero_points():
    # the block AutoAWQ writes (e.g. Qwen2.5-32B-Instruct-AWQ)
    quant = _read(
        {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
    )
    assert (quant.method, quant.group_size, quant.vllm_flag) == ("awq", 128, None)
    assert quant.bits == pytest.approx(4 + 20 / 128)
    assert quant.min_compute_capability == 7.5


def test_compressed_tensors_fp8_dynamic_needs_fp8_compute():
    # RedHatAI "FP8-dynamic": float8 weights per channel, dynamic float8 activations
    quant = _read({
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True},
        }},
        "ignore": ["lm_head"],
    })  # fmt: skip
    assert (quant.method, quant.bits, quant.min_compute_capability) == (
        "compressed-tensors",
        8.0,
        8.9,
    )
    assert not quant.keeps_attention


def test_bitsandbytes_four_bit():
    quant = _read(
        {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    )
    assert quant.method == "bitsandbytes" and quant.bits == pytest.approx(4.13)


def test_modelopt_nvfp4_from_hf_quant_config():
    quant = quantization_from_config(
        {},
        {},
        {"hf_quant_config.json": {"quantization": {"quant_algo": "NVFP4", "group_size": 16}}},
    )
    assert (quant.method, quant.bits, quant.min_compute_capability) == ("modelopt-fp4", 4.5, 10.0)


def test_an_unknown_modelopt_algorithm_is_one_sentence():
    with pytest.raises(BadInput, match="quant_algo W4A8_AWQ is not a format llmgw knows"):
        quantization_from_config(
            {}, {}, {"hf_quant_config.json": {"quantization": {"quant_algo": "W4A8_AWQ"}}}
        )


def test_online_fp8_is_passed_to_vllm_as_a_flag():
    assert online_fp8().vllm_flag == "fp8"


def test_a_quantization_config_without_a_method_is_refused():
    with pytest.raises(BadInput, match="has no quant_method"):
        _read({"bits": 4})
