"""How a shipped model is written down: one record per repository, and the families' configs.

Each record is what a model's own repository says about it — the
architecture in `config.json` terms, and the bytes of its weights (the
safetensors index's `total_size`, or each GGUF file's size) — retyped by us
from the published model cards, configs and listings, so that examples, the
demo and the tests plan real models offline. The keys are those `config.json`
uses, so the model package's own reader reads them; only the keys that decide
shape, memory and quantisation are written.

Where no byte total is published, `safetensors_bytes` stays None and the
model package counts the weights from the architecture (its
`counted_artifact`), and the record's `source` says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmgw_core.model.artifacts import GIB

# Llama 3.1's rotary scaling, shared by every Llama 3.1 / 3.3 checkpoint.
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

# DeepSeek-V3's block-wise FP8 (e4m3, 128 x 128 scales); Qwen3's FP8 repos use the same block.
BLOCK_FP8 = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": [128, 128],
}


@dataclass(frozen=True)
class CatalogModel:
    """One known model.

    Attributes:
        repo_id: the Hub repository it describes.
        config: `config.json` keys (architecture, sizes, heads, dtype, quantisation).
        safetensors_bytes: the index's `total_size` (or the one file's size), None
            when unpublished: then the weights are counted from the architecture.
        safetensors_shards: how many shard files the repository has.
        gguf_files: GGUF file name → bytes, for a repository of quantisations.
        parameters: the parameter count, when published.
        extra_files: other small JSON files that change how weights are read
            (`hf_quant_config.json` of a ModelOpt checkpoint, `quantize_config.json`).
        source: where the figures come from, in a few words.
    """

    repo_id: str
    config: dict[str, Any]
    safetensors_bytes: int | None = None
    safetensors_shards: int = 1
    gguf_files: dict[str, int] = field(default_factory=dict)
    parameters: int | None = None
    extra_files: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = ""


def llama(
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    *,
    vocab: int = 128256,
    max_position: int = 131072,
    rope_scaling: dict[str, Any] | None = LLAMA3_ROPE,
    rope_theta: float = 500000.0,
    dtype: str = "bfloat16",
) -> dict[str, Any]:
    """A Llama decoder's config (Llama 2 / 3 / 3.1 / 3.3 and their fine-tunes)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hidden // heads,
        "intermediate_size": intermediate,
        "vocab_size": vocab,
        "max_position_embeddings": max_position,
        "rope_theta": rope_theta,
        "rope_scaling": dict(rope_scaling) if rope_scaling else None,
        "attention_bias": False,
        "mlp_bias": False,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
    }


def mistral(
    *, vocab: int, max_position: int, sliding_window: int | None, rope_theta: float
) -> dict[str, Any]:
    """Mistral 7B's config (v0.1 with a 4096 window, v0.2 without one)."""
    return {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 14336,
        "vocab_size": vocab,
        "max_position_embeddings": max_position,
        "sliding_window": sliding_window,
        "rope_theta": rope_theta,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def mixtral_8x7b() -> dict[str, Any]:
    """Mixtral 8x7B: Mistral 7B's attention, eight experts of which two run per token."""
    return {
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
    }


def qwen2(
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    *,
    max_position: int,
    max_window_layers: int,
    sliding_window: int = 131072,
    vocab: int = 152064,
    rope_theta: float = 1000000.0,
    rms_norm_eps: float = 1e-06,
) -> dict[str, Any]:
    """A Qwen2 / Qwen1.5 / Qwen2.5 decoder: a window is named but switched off."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": intermediate,
        "vocab_size": vocab,
        "max_position_embeddings": max_position,
        "max_window_layers": max_window_layers,
        "sliding_window": sliding_window,
        "use_sliding_window": False,
        "rope_theta": rope_theta,
        "rms_norm_eps": rms_norm_eps,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def qwen3_dense(
    layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int
) -> dict[str, Any]:
    """A dense Qwen3 decoder (explicit head_dim 128, QK norms)."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": 128,
        "intermediate_size": intermediate,
        "attention_bias": False,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "max_window_layers": layers,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "sliding_window": None,
        "use_sliding_window": False,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def qwen3_moe(
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    expert_width: int,
    dense_width: int,
    *,
    quantization: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Qwen3 mixture of experts: 128 experts, 8 per token, every layer sparse."""
    config = qwen3_dense(layers, hidden, heads, kv_heads, dense_width)
    config.update(
        {
            "architectures": ["Qwen3MoeForCausalLM"],
            "model_type": "qwen3_moe",
            "moe_intermediate_size": expert_width,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "norm_topk_prob": True,
        }
    )
    if quantization:
        config["quantization_config"] = dict(quantization)
    return config


def deepseek_v3() -> dict[str, Any]:
    """DeepSeek-V3 / R1: MLA attention, 256 routed experts and one shared, FP8 blocks, one MTP layer."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "num_hidden_layers": 61,
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "moe_layer_freq": 1,
        "n_group": 8,
        "topk_group": 4,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "num_nextn_predict_layers": 1,
        "attention_bias": False,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
        "rope_theta": 10000,
        "rope_scaling": {
            "type": "yarn",
            "factor": 40,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "quantization_config": dict(BLOCK_FP8),
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def gpt_oss(layers: int, experts: int) -> dict[str, Any]:
    """gpt-oss: alternating 128-token window and full layers, MXFP4 experts, 4 per token."""
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "num_hidden_layers": layers,
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "num_local_experts": experts,
        "num_experts_per_tok": 4,
        "experts_per_token": 4,
        "attention_bias": True,
        "layer_types": ["sliding_attention", "full_attention"] * (layers // 2),
        "sliding_window": 128,
        "vocab_size": 201088,
        "max_position_embeddings": 131072,
        "initial_context_length": 4096,
        "rope_theta": 150000,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
        },
        "quantization_config": {
            "quant_method": "mxfp4",
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
        },
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
    }


def gguf_bytes(gib: float) -> int:
    """Bytes of a file whose size is published in GiB (as llama.cpp prints it)."""
    return round(gib * GIB)
