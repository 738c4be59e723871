"""Per-architecture rules of `config.json`: what each family leaves out or says its own way (pure).

The defaults the `transformers` config classes fill in for a key a config
omits, the architectures this planner cannot size, and each family's rule
for which layers carry routed experts and which attention each layer uses
(full, sliding window, chunked local).
"""

from __future__ import annotations

from typing import Any

from llmgw_core.errors import BadInput, shown_value
from llmgw_core.model.config_numbers import optional_config_int
from llmgw_core.model.model_shape import CHUNKED, FULL, SLIDING

# Values the transformers config classes fill in when a config.json leaves a key out.
# Only keys that change memory are listed. Sources: the `*Config.__init__` defaults of
# transformers (Gemma3TextConfig, Gemma2Config, LlamaConfig, MistralConfig, ...).
ARCH_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "vocab_size": 262208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131072,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
        "tie_word_embeddings": True,
        "rope_theta": 1_000_000.0,
    },
    "gemma2": {
        "vocab_size": 256000,
        "head_dim": 256,
        "max_position_embeddings": 8192,
        "sliding_window": 4096,
        "tie_word_embeddings": True,
    },
    "gemma": {"vocab_size": 256000, "head_dim": 256, "tie_word_embeddings": True},
    "llama": {"vocab_size": 32000, "max_position_embeddings": 2048},
    "mistral": {"vocab_size": 32000, "max_position_embeddings": 131072, "sliding_window": 4096},
    "mixtral": {
        "vocab_size": 32000,
        "max_position_embeddings": 131072,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    },
    "qwen2": {"vocab_size": 151936, "max_position_embeddings": 32768},
    "qwen2_moe": {"vocab_size": 151936, "max_position_embeddings": 32768},
    "qwen3": {"vocab_size": 151936, "max_position_embeddings": 32768},
    "qwen3_moe": {
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
    },
    "llama4_text": {
        "vocab_size": 202048,
        "attention_chunk_size": 8192,
        "max_position_embeddings": 4096 * 32,
        "head_dim": 128,
    },
    "gpt_oss": {
        "vocab_size": 201088,
        "head_dim": 64,
        "sliding_window": 128,
        "max_position_embeddings": 131072,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
    },
    "deepseek_v2": {"vocab_size": 102400, "max_position_embeddings": 2048},
    "deepseek_v3": {"vocab_size": 129280, "max_position_embeddings": 4096},
    "kimi_k2": {"vocab_size": 163840},
}

# Architectures whose memory does not follow a decoder-only transformer with a KV cache.
UNSUPPORTED_MODEL_TYPES = {
    "bert": "an encoder without a KV cache",
    "roberta": "an encoder without a KV cache",
    "t5": "an encoder-decoder",
    "bart": "an encoder-decoder",
    "whisper": "a speech encoder-decoder",
    "mamba": "a state-space model without a KV cache",
    "mamba2": "a state-space model without a KV cache",
    "rwkv": "a recurrent model without a KV cache",
    "jamba": "a hybrid state-space model",
    "qwen3_next": "a hybrid linear-attention model",
    "clip": "a vision encoder",
    "siglip": "a vision encoder",
}


def moe_layer_flags(body: dict[str, Any], num_layers: int, model_type: str) -> tuple[bool, ...]:
    """Which layers carry routed experts, by each family's own keys."""
    first_dense = optional_config_int(body, "first_k_dense_replace") or 0
    every = (
        optional_config_int(
            body, "moe_layer_freq", "decoder_sparse_step", "interleave_moe_layer_step"
        )
        or 1
    )
    dense_raw = body.get("mlp_only_layers")
    dense_only = (
        {x for x in dense_raw if isinstance(x, int)} if isinstance(dense_raw, list) else set()
    )
    moe_listed = body.get("moe_layers")
    if isinstance(moe_listed, list) and moe_listed:
        listed = {x for x in moe_listed if isinstance(x, int)}
        return tuple(i in listed for i in range(num_layers))
    flags = []
    for i in range(num_layers):
        if model_type == "llama4_text":
            is_moe = (i + 1) % every == 0
        else:
            is_moe = i >= first_dense and (i + 1) % every == 0 and i not in dense_only
        flags.append(is_moe)
    return tuple(flags)


def attention_pattern(
    body: dict[str, Any], num_layers: int, model_type: str
) -> tuple[tuple[str, ...], int | None, int | None]:
    """Per-layer attention kind, the window and the chunk, by each family's rule."""
    window = optional_config_int(body, "sliding_window")
    chunk = (
        optional_config_int(body, "attention_chunk_size") if model_type == "llama4_text" else None
    )
    types = body.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != num_layers:
            raise BadInput(
                f"config.json: layer_types lists {len(types)} layers, num_hidden_layers is {num_layers}"
            )
        kinds = []
        for entry in types:
            name = str(entry)
            if name in ("full_attention", "global_attention", "attention"):
                kinds.append(FULL)
            elif name in ("sliding_attention", "local_attention"):
                kinds.append(SLIDING)
            elif name == "chunked_attention":
                kinds.append(CHUNKED)
            else:
                raise BadInput(
                    f"layer type {shown_value(name)} is not supported",
                    "llmgw sizes full, sliding-window and chunked attention layers",
                )
        if SLIDING in kinds and not window:
            raise BadInput("config.json has sliding layers but no sliding_window")
        return (
            tuple(kinds),
            window if SLIDING in kinds else None,
            chunk if CHUNKED in kinds else None,
        )
    if model_type == "llama4_text" and chunk:
        no_rope = body.get("no_rope_layers")
        if isinstance(no_rope, list) and len(no_rope) == num_layers:
            # 1 = the layer uses RoPE = chunked local attention; 0 = global NoPE layer.
            kinds = [CHUNKED if flag else FULL for flag in no_rope]
        else:
            interval = optional_config_int(body, "no_rope_layer_interval") or 4
            kinds = [FULL if (i + 1) % interval == 0 else CHUNKED for i in range(num_layers)]
        return tuple(kinds), None, chunk
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        # Qwen ships a `sliding_window` value but disables it with use_sliding_window: false.
        if not body.get("use_sliding_window") or not window:
            return (FULL,) * num_layers, None, None
        first_windowed = optional_config_int(body, "max_window_layers") or 0
        kinds = [SLIDING if i >= first_windowed else FULL for i in range(num_layers)]
        return tuple(kinds), window if SLIDING in kinds else None, None
    if model_type == "gemma3_text" and window:
        pattern = optional_config_int(body, "sliding_window_pattern") or 6
        kinds = [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(num_layers)]
        return tuple(kinds), window, None
    if model_type == "gemma2" and window:
        kinds = [SLIDING if i % 2 == 0 else FULL for i in range(num_layers)]
        return tuple(kinds), window, None
    if model_type == "gpt_oss" and window:
        kinds = [SLIDING if i % 2 == 0 else FULL for i in range(num_layers)]
        return tuple(kinds), window, None
    if (
        window
        and model_type in ("mistral", "mixtral")
        and window < (optional_config_int(body, "max_position_embeddings") or 0)
    ):
        return (SLIDING,) * num_layers, window, None
    return (FULL,) * num_layers, None, None
