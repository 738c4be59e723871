"""The models the product knows without the Hub: their published facts, written by us.

Each entry is what a model's own repository says about it — the
architecture in `config.json` terms, and the bytes of its weights (the
safetensors index's `total_size`, or each GGUF file's size) — retyped here
from the public model cards and indexes so that examples, the demo and the
tests plan real models offline. Nothing here is copied from a repository
file; the keys are those `config.json` uses so the same shape reader reads
them. Where a total is counted from the architecture rather than read from an
index, the entry says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GIB = 1024**3


@dataclass(frozen=True)
class CatalogModel:
    """One known model.

    Attributes:
        repo_id: the Hub repository it describes.
        config: `config.json` keys (architecture, sizes, heads, dtype …).
        safetensors_bytes: the index's `total_size`, when the repository has safetensors.
        safetensors_shards: how many shard files the index names.
        gguf_files: GGUF file name → bytes, for a repository of quantisations.
        parameters: the parameter count (a bf16 checkpoint holds two bytes of each).
        source: where the figures come from, in a few words.
    """

    repo_id: str
    config: dict[str, Any]
    safetensors_bytes: int | None = None
    safetensors_shards: int = 1
    gguf_files: dict[str, int] = field(default_factory=dict)
    parameters: int | None = None
    source: str = ""


def _llama(
    layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int
) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": 128,
        "intermediate_size": intermediate,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def _qwen3_moe(
    layers: int, hidden: int, heads: int, kv_heads: int, expert_width: int, dense_width: int
) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": 128,
        "intermediate_size": dense_width,
        "moe_intermediate_size": expert_width,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


_QWEN25_14B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "num_hidden_layers": 48,
    "hidden_size": 5120,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "intermediate_size": 13824,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06,
    "use_sliding_window": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _gguf_bytes(gib: float) -> int:
    return round(gib * GIB)


CATALOG: tuple[CatalogModel, ...] = (
    CatalogModel(
        "meta-llama/Llama-3.3-70B-Instruct",
        _llama(80, 8192, 64, 8, 28672),
        safetensors_bytes=141_107_412_992,
        safetensors_shards=30,
        source="model card and safetensors index (total_size)",
    ),
    CatalogModel(
        "meta-llama/Llama-3.1-70B-Instruct",
        _llama(80, 8192, 64, 8, 28672),
        safetensors_bytes=141_107_412_992,
        safetensors_shards=30,
        source="model card and safetensors index (total_size)",
    ),
    CatalogModel(
        "meta-llama/Llama-3.1-8B-Instruct",
        _llama(32, 4096, 32, 8, 14336),
        safetensors_bytes=16_060_522_496,
        safetensors_shards=4,
        source="model card and safetensors index (total_size)",
    ),
    CatalogModel(
        "Qwen/Qwen3-235B-A22B",
        _qwen3_moe(94, 4096, 64, 4, 1536, 12288),
        safetensors_bytes=470_187_269_120,
        safetensors_shards=118,
        source="model card; total counted from the architecture (235.09 B parameters in bf16)",
    ),
    CatalogModel(
        "Qwen/Qwen3-30B-A3B",
        _qwen3_moe(48, 2048, 32, 4, 768, 6144),
        safetensors_bytes=61_064_245_248,
        safetensors_shards=16,
        source="model card; total counted from the architecture (vLLM loads 56.88 GiB of it)",
    ),
    CatalogModel(
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "num_hidden_layers": 32,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "intermediate_size": 14336,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "vocab_size": 32000,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-05,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
        },
        safetensors_bytes=93_405_585_408,
        safetensors_shards=19,
        source="safetensors index (total_size)",
    ),
    CatalogModel(
        "Qwen/Qwen2.5-14B-Instruct",
        _QWEN25_14B,
        safetensors_bytes=29_540_067_328,
        safetensors_shards=8,
        source="model card; total counted from the architecture (14.77 B parameters in bf16)",
    ),
    CatalogModel(
        "Qwen/Qwen2.5-14B-Instruct-GGUF",
        _QWEN25_14B,
        parameters=14_770_033_664,
        gguf_files={
            "qwen2.5-14b-instruct-q2_k.gguf": _gguf_bytes(5.37),
            "qwen2.5-14b-instruct-q3_k_m.gguf": _gguf_bytes(6.83),
            # llama.cpp reports 8.37 GiB (4.87 BPW) and 14.62 GiB for these two.
            "qwen2.5-14b-instruct-q4_k_m.gguf": _gguf_bytes(8.37),
            "qwen2.5-14b-instruct-q5_k_m.gguf": _gguf_bytes(9.78),
            "qwen2.5-14b-instruct-q6_k.gguf": _gguf_bytes(11.29),
            "qwen2.5-14b-instruct-q8_0.gguf": _gguf_bytes(14.62),
            "qwen2.5-14b-instruct-f16.gguf": _gguf_bytes(27.51),
        },
        source="published file sizes (Q4_K_M and Q8_0 as llama.cpp reports them)",
    ),
)
