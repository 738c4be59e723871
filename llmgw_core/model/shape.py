"""A model's shape, read from its Hugging Face `config.json` (pure, no I/O).

Everything the memory rules need is read here once: layers, widths, heads,
KV heads, head size, vocabulary, trained context, experts, MLA, the per-layer
attention pattern (full, sliding window, chunked local) and the weights'
quantisation. Multimodal configs (Gemma 3, Llama 4, Kimi) are sized by their
`text_config`; keys a config leaves out take the architecture's defaults (the
values the `transformers` config classes would fill in), because the minimal
files the Hub ships (gemma-3-27b-it lists ten text keys) rely on them.

The record itself is `model_shape`'s; every count is read through
`config_numbers`, and what differs by family comes from `family_rules`.
"""

from __future__ import annotations

from typing import Any

from llmgw_core.errors import BadInput, shown_value
from llmgw_core.model.config_numbers import (
    MAX_LAYERS,
    bounded_count,
    config_int,
    optional_config_int,
    positive_config_number,
)
from llmgw_core.model.family_rules import (
    ARCH_DEFAULTS,
    UNSUPPORTED_MODEL_TYPES,
    attention_pattern,
    moe_layer_flags,
)
from llmgw_core.model.model_shape import (
    CHUNKED,
    FULL,
    SLIDING,
    MlaShape,
    ModelShape,
    check_shape,
)
from llmgw_core.model.quantization import Quantization, quantization_from_config

__all__ = [
    "CHUNKED",
    "FULL",
    "MAX_LAYERS",
    "SLIDING",
    "MlaShape",
    "ModelShape",
    "Quantization",
    "bounded_count",
    "check_shape",
    "is_full_config",
    "shape_from_config",
]

_DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}


# Older families name the same facts differently (GPT-2/NeoX/BigCode, ChatGLM).
_ALIASES = {
    "n_layer": "num_hidden_layers",
    "num_layers": "num_hidden_layers",
    "n_embd": "hidden_size",
    "n_head": "num_attention_heads",
    "n_positions": "max_position_embeddings",
    "n_inner": "intermediate_size",
    "ffn_hidden_size": "intermediate_size",
    "multi_query_group_num": "num_key_value_heads",
    "padded_vocab_size": "vocab_size",
}


def _with_standard_names(body: dict[str, Any]) -> dict[str, Any]:
    """The config with older key names copied to the standard ones (never overriding them)."""
    renamed = dict(body)
    for old, new in _ALIASES.items():
        if old in body and new not in body:
            renamed[new] = body[old]
    return renamed


def _name(body: dict[str, Any], key: str) -> str:
    """A name the config gives (`model_type`, the first of `architectures`): text, or ""."""
    value = body.get(key)
    if isinstance(value, list):
        value = value[0] if value else None
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or len(value) > 200 or any(c < " " for c in value):
        raise BadInput(f"config.json: {key} is {shown_value(value)}, not a name")
    return value


def is_full_config(config: dict[str, Any]) -> bool:
    """True when `config` describes a language model (not a GGUF repo's stub).

    A GGUF repository often ships `{"model_type": "mistral"}` so the Hub can
    label it; such a file has no layer count and is no shape.
    """
    text = config.get("text_config")
    body = _with_standard_names(text if isinstance(text, dict) and text else config)
    return any(key in body for key in ("num_hidden_layers", "hidden_size"))


def shape_from_config(
    config: dict[str, Any], *, extra_files: dict[str, dict[str, Any]] | None = None
) -> ModelShape:
    """Read a model's shape from its `config.json`.

    Args:
        config: the parsed `config.json`.
        extra_files: other small JSON files of the repository by name, e.g.
            `hf_quant_config.json` (ModelOpt checkpoints) or `quantize_config.json`.

    Raises:
        BadInput: one sentence when the config is malformed or its architecture
            is not a decoder-only transformer this planner can size.
    """
    if not isinstance(config, dict):
        raise BadInput("config.json is not a JSON object", "check that the file is a model config")
    top_type = _name(config, "model_type")
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list):
        raise BadInput(f"config.json: architectures is {shown_value(architectures)}, not a list")
    architecture = (
        _name({"architectures": architectures[:1]}, "architectures") if architectures else ""
    )
    text = config.get("text_config")
    if isinstance(text, dict) and text:
        body = dict(text)
        multimodal = True
    else:
        body = dict(config)
        multimodal = False
    model_type = _name(body, "model_type") or top_type
    if not model_type and not architecture:
        raise BadInput(
            "config.json names no model_type or architectures",
            "is this a Hugging Face model config?",
        )
    why = UNSUPPORTED_MODEL_TYPES.get(model_type) or UNSUPPORTED_MODEL_TYPES.get(top_type)
    if why:
        raise BadInput(
            f"architecture {architecture or model_type} is not supported: it is {why}",
            "llmgw plans decoder-only transformers",
        )
    if multimodal and model_type not in ARCH_DEFAULTS and top_type == "gemma3":
        model_type = "gemma3_text"
    body = _with_standard_names(body)
    merged: dict[str, Any] = dict(ARCH_DEFAULTS.get(model_type, {}))
    merged.update({k: v for k, v in body.items() if v is not None or k not in merged})
    if not is_full_config(body):
        raise BadInput(
            f"config.json of {architecture or model_type} has no num_hidden_layers",
            "it is not a full model config (a GGUF repository's stub?)",
        )
    shape = _build(merged, config, architecture, model_type, multimodal, extra_files or {})
    return check_shape(shape, "config.json")


def _dtype(body: dict[str, Any], top: dict[str, Any]) -> str:
    for source in (body, top):
        for key in ("torch_dtype", "dtype"):
            value = source.get(key)
            if isinstance(value, str) and value.lower() in _DTYPES:
                return _DTYPES[value.lower()]
            if value is not None and value != "auto":
                raise BadInput(
                    f"config.json: {key} is {shown_value(value)}, not a dtype weights are stored in",
                    f"known: {', '.join(sorted(_DTYPES))}",
                )
    # No dtype key (gpt-oss): the unquantised tensors of every such checkpoint
    # we know ship in bfloat16, which is also what vLLM serves a missing dtype in.
    return "bfloat16"


def _build(
    body: dict[str, Any],
    top: dict[str, Any],
    architecture: str,
    model_type: str,
    multimodal: bool,
    extra_files: dict[str, dict[str, Any]],
) -> ModelShape:
    num_layers = config_int(body, "num_hidden_layers")
    hidden = config_int(body, "hidden_size")
    heads = config_int(body, "num_attention_heads")
    if num_layers == 0 or hidden == 0 or heads == 0:
        raise BadInput("config.json has zero layers, hidden size or attention heads")
    if num_layers > MAX_LAYERS:
        raise BadInput(
            f"config.json: num_hidden_layers is {num_layers}, more than any model has",
            "the config is damaged",
        )
    kv_heads = optional_config_int(body, "num_key_value_heads", "num_kv_heads")
    if kv_heads is None:
        kv_heads = heads
    if kv_heads == 0 or heads % kv_heads:
        raise BadInput(
            f"config.json: num_key_value_heads is {kv_heads}, which does not divide "
            f"num_attention_heads ({heads})",
            "the config is damaged",
        )
    head_dim = optional_config_int(body, "head_dim")
    if head_dim == 0:
        raise BadInput("config.json: head_dim is 0", "the config is damaged")
    if head_dim is None:
        if hidden % heads:
            raise BadInput(
                f"config.json: hidden_size ({hidden}) is not a multiple of "
                f"num_attention_heads ({heads}) and no head_dim is given",
                "the config is damaged",
            )
        head_dim = hidden // heads
    vocab = config_int(body, "vocab_size")
    max_context = optional_config_int(body, "max_position_embeddings", "max_seq_len", "seq_length")
    intermediate = optional_config_int(body, "intermediate_size", "ffn_dim") or 4 * hidden

    num_experts = optional_config_int(body, "num_local_experts", "n_routed_experts", "num_experts")
    experts_per_token = optional_config_int(body, "num_experts_per_tok", "experts_per_token")
    if num_experts is not None and num_experts <= 1:
        num_experts, experts_per_token = None, None

    moe_intermediate = optional_config_int(body, "moe_intermediate_size")
    shared_experts = optional_config_int(body, "n_shared_experts") or 0
    shared_intermediate = optional_config_int(body, "shared_expert_intermediate_size")
    dense_intermediate: int | None = None
    if num_experts and moe_intermediate is None:
        # Mixtral, gpt-oss, Llama 4: `intermediate_size` is each expert's width.
        moe_intermediate = intermediate
    if model_type == "llama4_text" and num_experts:
        shared_experts = 1
        shared_intermediate = intermediate
        dense_intermediate = optional_config_int(body, "intermediate_size_mlp") or intermediate
    elif num_experts and model_type in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        dense_intermediate = intermediate
        if shared_experts and moe_intermediate:
            shared_intermediate = shared_experts * moe_intermediate
    elif num_experts and shared_intermediate:
        shared_experts = 1
    moe_layers = moe_layer_flags(body, num_layers, model_type) if num_experts else ()

    mla = None
    if body.get("kv_lora_rank"):
        mla = MlaShape(
            kv_lora_rank=config_int(body, "kv_lora_rank"),
            qk_rope_head_dim=config_int(body, "qk_rope_head_dim", default=64),
            qk_nope_head_dim=config_int(body, "qk_nope_head_dim", default=128),
            v_head_dim=config_int(body, "v_head_dim", default=128),
            q_lora_rank=optional_config_int(body, "q_lora_rank"),
        )
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim

    layer_attention, sliding_window, chunk = attention_pattern(body, num_layers, model_type)
    rope = body.get("rope_scaling")
    if rope is not None and not isinstance(rope, dict):
        raise BadInput(f"config.json: rope_scaling is {shown_value(rope)}, not an object")
    rope = rope or {}
    rope_type = rope.get("rope_type") or rope.get("type") if rope else None
    rope_factor = positive_config_number(rope.get("factor"), "rope_scaling.factor") or 1.0
    rope_original = positive_config_number(
        rope.get("original_max_position_embeddings"),
        "rope_scaling.original_max_position_embeddings",
    )
    rotary_dim = mla.qk_rope_head_dim if mla else head_dim
    partial = body.get("partial_rotary_factor")
    if isinstance(partial, int | float) and 0 < partial < 1 and not mla:  # NaN fails both
        rotary_dim = int(head_dim * partial)

    tie = body.get("tie_word_embeddings")
    if tie is None:
        tie = top.get("tie_word_embeddings", False)
    qkv_bias = bool(body.get("attention_bias")) or model_type in ("qwen2", "qwen2_moe")
    norms_per_layer = 4 if model_type in ("gemma2", "gemma3_text") else 2

    return ModelShape(
        architecture=architecture or model_type,
        model_type=model_type,
        num_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        max_context=max_context or 2048,
        dtype=_dtype(body, top),
        intermediate_size=intermediate,
        num_experts=num_experts,
        experts_per_token=experts_per_token,
        moe_intermediate_size=moe_intermediate if num_experts else None,
        mla=mla,
        layer_attention=layer_attention,
        sliding_window=sliding_window,
        attention_chunk_size=chunk,
        quantization=quantization_from_config(body, top, extra_files),
        tie_word_embeddings=bool(tie),
        moe_layers=moe_layers,
        num_shared_experts=shared_experts,
        shared_expert_intermediate_size=shared_intermediate,
        dense_intermediate_size=dense_intermediate,
        attention_bias=qkv_bias,
        output_bias=bool(body.get("attention_bias")) and model_type == "gpt_oss",
        qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3_text")
        or bool(body.get("use_qk_norm")),
        norms_per_layer=norms_per_layer,
        num_mtp_layers=optional_config_int(body, "num_nextn_predict_layers") or 0,
        rope_type=str(rope_type) if isinstance(rope_type, str) else None,
        rope_factor=rope_factor,
        rope_original_max_position=int(rope_original) if rope_original else None,
        rotary_dim=rotary_dim,
        multimodal=multimodal,
    )
