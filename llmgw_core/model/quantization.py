"""How a checkpoint's weights are quantised, read from its config files (pure).

Formats recognised: `quantization_config` with `quant_method` fp8, awq, gptq,
mxfp4, compressed-tensors, bitsandbytes (and a few kin), and NVIDIA ModelOpt
checkpoints whose format lives only in `hf_quant_config.json`.

`bits` is the stored cost of one quantised weight including its scales
(GPTQ 4-bit with groups of 128 stores 4 bits plus a 16-bit scale and a 4-bit
zero per group: 4.16 bits). `min_compute_capability` is the oldest GPU vLLM
loads the format on; where vLLM falls back to its Marlin weight-only kernels
(FP8 and MXFP4 on Ampere) the fallback's 8.0 is given and `note` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmgw_core.errors import BadInput, shown_value
from llmgw_core.model.numbers import whole_number


@dataclass(frozen=True)
class Quantization:
    """A checkpoint's weight format.

    Attributes:
        method: "fp8" | "awq" | "gptq" | "mxfp4" | "compressed-tensors" |
            "modelopt-fp8" | "modelopt-fp4" | "bitsandbytes" | a GGUF type name.
        bits: stored bits per quantised weight, scales included.
        vllm_flag: what to pass as vLLM's `--quantization` when it must be
            passed, None when vLLM detects it from the checkpoint.
        min_compute_capability: oldest GPU generation vLLM serves it on.
        group_size: weights sharing one scale, when grouped.
        experts_only: only the MoE experts are quantised (gpt-oss MXFP4).
        keeps_attention: attention projections stay in 16-bit (ignored by the scheme).
        keeps_dense_mlp: dense / shared-expert MLPs stay in 16-bit.
        kv_cache_dtype: a KV-cache format the checkpoint ships scales for ("fp8"), else None.
        note: one sentence on kernels or fallbacks, "" when nothing to say.
    """

    method: str
    bits: float
    vllm_flag: str | None = None
    min_compute_capability: float | None = None
    group_size: int | None = None
    experts_only: bool = False
    keeps_attention: bool = False
    keeps_dense_mlp: bool = False
    kv_cache_dtype: str | None = None
    note: str = ""


def _whole(value: Any, key: str, default: int) -> int:
    """A whole number from a quantisation block, the default when absent."""
    if value is None:
        return default
    number = whole_number(value)
    if number is None or not 0 < number <= MAX_QUANT_NUMBER:
        raise BadInput(
            f"quantization_config: {key} is {shown_value(value)}, not a positive whole number"
        )
    return number


MAX_QUANT_NUMBER = 2**20
"""Bits, group sizes and the like: none comes near (a group of a million weights is none)."""


def _grouped_int_bits(bits: int, group_size: int | None, *, zero_point: bool) -> float:
    """Stored bits per weight of an integer format with a 16-bit scale (and zero) per group."""
    if not group_size or group_size <= 0:
        return float(bits)
    overhead = 16 + (bits if zero_point else 0)
    return bits + overhead / group_size


def online_fp8() -> Quantization:
    """vLLM's `--quantization fp8` on a 16-bit checkpoint: linear weights cast at load."""
    return Quantization(
        method="fp8",
        bits=8.0,
        vllm_flag="fp8",
        min_compute_capability=8.0,
        note="FP8 compute needs compute capability 8.9; Ampere runs Marlin weight-only FP8",
    )


def quantization_from_config(
    body: dict[str, Any], top: dict[str, Any], extra_files: dict[str, dict[str, Any]]
) -> Quantization | None:
    """The weights' quantisation from `quantization_config` or `hf_quant_config.json`.

    Args:
        body: the language model's config (the `text_config` for multimodal models).
        top: the whole config.json.
        extra_files: other small JSON files of the repository by name.

    Raises:
        BadInput: when a quantization_config is present but unreadable.
    """
    raw = body.get("quantization_config") or top.get("quantization_config")
    if raw is None and "quantize_config.json" in extra_files:
        raw = dict(extra_files["quantize_config.json"])
        raw.setdefault("quant_method", "gptq")
    if raw is not None:
        if not isinstance(raw, dict):
            raise BadInput("config.json: quantization_config is not a mapping")
        return _from_quantization_config(raw)
    modelopt = extra_files.get("hf_quant_config.json")
    if modelopt:
        return _from_modelopt(modelopt)
    return None


def _from_quantization_config(raw: dict[str, Any]) -> Quantization:
    method = str(raw.get("quant_method") or "").lower()
    if method == "fp8":
        return Quantization(
            method="fp8",
            bits=8.0,
            min_compute_capability=8.0,
            note="FP8 compute needs compute capability 8.9; Ampere runs Marlin weight-only FP8",
        )
    if method in ("awq", "gptq"):
        bits = _whole(raw.get("bits", raw.get("w_bit")), "bits", 4)
        group = raw.get("group_size") or raw.get("q_group_size")
        group_size = int(group) if isinstance(group, int) and group > 0 else None
        return Quantization(
            method=method,
            bits=_grouped_int_bits(bits, group_size, zero_point=True),
            min_compute_capability=7.5 if method == "awq" else 6.0,
            group_size=group_size,
            note=f"vLLM picks {method}_marlin on compute capability 8.0 and newer",
        )
    if method == "mxfp4":
        return Quantization(
            method="mxfp4",
            bits=4.25,
            min_compute_capability=8.0,
            experts_only=True,
            note="native MXFP4 needs compute capability 10.0; Hopper and Ampere run Marlin or Triton kernels",
        )
    if method == "compressed-tensors":
        return _from_compressed_tensors(raw)
    if method == "bitsandbytes":
        four_bit = bool(raw.get("load_in_4bit"))
        return Quantization(
            method="bitsandbytes",
            bits=4.13 if four_bit else 8.06,
            min_compute_capability=7.0,
            group_size=64 if four_bit else None,
        )
    if method in ("modelopt", "modelopt_fp4"):
        return _from_modelopt({"quantization": {"quant_algo": raw.get("quant_algo", "FP8")}})
    if not method:
        raise BadInput("config.json: quantization_config has no quant_method")
    bits = raw.get("bits") or raw.get("num_bits") or raw.get("weight_bits")
    known_bits = isinstance(bits, int | float) and not isinstance(bits, bool) and 0 < bits <= 32
    return Quantization(method=method, bits=float(bits) if known_bits else 8.0)


def _from_compressed_tensors(raw: dict[str, Any]) -> Quantization:
    groups = raw.get("config_groups") or {}
    weights: dict[str, Any] = {}
    activations: dict[str, Any] | None = None
    for group in groups.values() if isinstance(groups, dict) else []:
        if isinstance(group, dict) and isinstance(group.get("weights"), dict):
            weights = group["weights"]
            activations = group.get("input_activations")
            break
    num_bits = _whole(weights.get("num_bits"), "num_bits", 8)
    kind = str(weights.get("type") or "int")
    group_size = (
        _whole(weights.get("group_size"), "group_size", 0) or None
        if weights.get("strategy") == "group"
        else None
    )
    ignore_raw = raw.get("ignore")
    ignore = [str(x) for x in ignore_raw] if isinstance(ignore_raw, list) else []
    keeps_attention = any("self_attn" in x for x in ignore)
    keeps_dense = any("shared_expert" in x for x in ignore) or any("mlp\\." in x for x in ignore)
    if kind == "float" and num_bits == 8:
        bits, capability = 8.0, 8.9 if activations else 8.0
    elif kind == "float" and num_bits == 4:
        bits, capability = 4.5, 10.0
    else:
        bits = _grouped_int_bits(
            num_bits, group_size, zero_point=not weights.get("symmetric", True)
        )
        capability = 8.0 if activations is None else 7.5
    return Quantization(
        method="compressed-tensors",
        bits=round(bits, 4),
        min_compute_capability=capability,
        group_size=int(group_size) if group_size else None,
        keeps_attention=keeps_attention,
        keeps_dense_mlp=keeps_dense,
        kv_cache_dtype="fp8" if raw.get("kv_cache_scheme") else None,
        note=f"{kind}{num_bits} weights" + (" with quantised activations" if activations else ""),
    )


def _from_modelopt(raw: dict[str, Any]) -> Quantization:
    section = raw.get("quantization") if isinstance(raw.get("quantization"), dict) else raw
    algo = str(section.get("quant_algo") or "").upper()
    kv_algo = str(section.get("kv_cache_quant_algo") or "").upper()
    kv = "fp8" if kv_algo == "FP8" else None
    if algo == "FP8":
        return Quantization(
            method="modelopt-fp8",
            bits=8.0,
            min_compute_capability=8.9,
            kv_cache_dtype=kv,
            note="NVIDIA ModelOpt FP8, detected by vLLM from hf_quant_config.json",
        )
    if algo in ("NVFP4", "FP4"):
        return Quantization(
            method="modelopt-fp4",
            bits=4.5,
            min_compute_capability=10.0,
            group_size=16,
            kv_cache_dtype=kv,
            note="NVFP4 runs natively on compute capability 10.0 (Blackwell)",
        )
    raise BadInput(
        f"hf_quant_config.json: quant_algo {algo or 'missing'} is not a format llmgw knows",
        "supported ModelOpt formats are FP8 and NVFP4",
    )
