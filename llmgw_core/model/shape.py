"""A model's shape, read from its Hugging Face `config.json` (pure, no I/O).

Everything the memory rules need is read here once: layers, widths, heads,
KV heads, head size, vocabulary, trained context, experts, MLA, the per-layer
attention pattern (full, sliding window, chunked local) and the weights'
quantisation. Multimodal configs (Gemma 3, Llama 4, Kimi) are sized by their
`text_config`; keys a config leaves out take the architecture's defaults (the
values the `transformers` config classes would fill in), because the minimal
files the Hub ships (gemma-3-27b-it lists ten text keys) rely on them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llmgw_core.errors import BadInput, shown_value
from llmgw_core.model.numbers import whole_number
from llmgw_core.model.quantization import Quantization, quantization_from_config

__all__ = [
    "MlaShape",
    "ModelShape",
    "Quantization",
    "is_full_config",
    "shape_from_config",
]

FULL = "full"
MAX_LAYERS = 10_000  # a sanity bound: the deepest published models have a few hundred
SLIDING = "sliding"
CHUNKED = "chunked"


@dataclass(frozen=True)
class MlaShape:
    """Multi-head latent attention (DeepSeek V2/V3, Kimi K2): the KV cache is one latent.

    Attributes:
        kv_lora_rank: width of the compressed KV latent (512 for DeepSeek-V3).
        qk_rope_head_dim: width of the decoupled rotary key (64), cached beside the latent.
        qk_nope_head_dim: per-head non-rotary query/key width (128).
        v_head_dim: per-head value width (128).
        q_lora_rank: width of the query compression, None when queries are not compressed.
    """

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int = 128
    v_head_dim: int = 128
    q_lora_rank: int | None = None

    @property
    def latent_width(self) -> int:
        """Values cached per token per layer: latent plus rotary key (576 for DeepSeek-V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class ModelShape:
    """The language model's shape, as the engines size it.

    The first block of fields is the contract with the planner; the rest are
    what parameter counting and the engines' finer rules need.
    """

    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_context: int
    dtype: str
    intermediate_size: int
    num_experts: int | None
    experts_per_token: int | None
    moe_intermediate_size: int | None
    mla: MlaShape | None
    layer_attention: tuple[str, ...]
    sliding_window: int | None
    attention_chunk_size: int | None
    quantization: Quantization | None
    tie_word_embeddings: bool
    # Finer facts (defaults keep hand-built shapes in tests short).
    moe_layers: tuple[bool, ...] = ()
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int | None = None
    dense_intermediate_size: int | None = None
    attention_bias: bool = False
    output_bias: bool = False
    qk_norm: bool = False
    norms_per_layer: int = 2
    num_mtp_layers: int = 0
    rope_type: str | None = None
    rope_factor: float = 1.0
    rope_original_max_position: int | None = None
    rotary_dim: int | None = None
    multimodal: bool = False

    @property
    def is_moe(self) -> bool:
        """True when some layers route tokens to experts."""
        return bool(self.num_experts) and self.num_experts > 1

    @property
    def kv_head_dim(self) -> int:
        """Values cached per KV head per token: the MLA latent for MLA, else head_dim."""
        return self.mla.latent_width if self.mla else self.head_dim

    def layer_is_moe(self, layer: int) -> bool:
        """True when `layer` (0-based) has routed experts."""
        if not self.is_moe:
            return False
        return self.moe_layers[layer] if self.moe_layers else True

    def count_layers(self, kind: str) -> int:
        """How many layers use attention `kind` ("full", "sliding", "chunked")."""
        return sum(1 for k in self.layer_attention if k == kind)


# Values the transformers config classes fill in when a config.json leaves a key out.
# Only keys that change memory are listed. Sources: the `*Config.__init__` defaults of
# transformers (Gemma3TextConfig, Gemma2Config, LlamaConfig, MistralConfig, ...).
_ARCH_DEFAULTS: dict[str, dict[str, Any]] = {
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
_UNSUPPORTED_MODEL_TYPES = {
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
    why = _UNSUPPORTED_MODEL_TYPES.get(model_type) or _UNSUPPORTED_MODEL_TYPES.get(top_type)
    if why:
        raise BadInput(
            f"architecture {architecture or model_type} is not supported: it is {why}",
            "llmgw plans decoder-only transformers",
        )
    if multimodal and model_type not in _ARCH_DEFAULTS and top_type == "gemma3":
        model_type = "gemma3_text"
    body = _with_standard_names(body)
    merged: dict[str, Any] = dict(_ARCH_DEFAULTS.get(model_type, {}))
    merged.update({k: v for k, v in body.items() if v is not None or k not in merged})
    if not is_full_config(body):
        raise BadInput(
            f"config.json of {architecture or model_type} has no num_hidden_layers",
            "it is not a full model config (a GGUF repository's stub?)",
        )
    shape = _build(merged, config, architecture, model_type, multimodal, extra_files or {})
    return check_shape(shape, "config.json")


def check_shape(shape: ModelShape, where: str) -> ModelShape:
    """Refuse a shape no model can have, whichever file it was read from.

    Raises:
        BadInput: more experts per token than experts, more attention heads
            than the hidden size holds, more key/value heads than heads.
    """
    experts, used = shape.num_experts, shape.experts_per_token
    if experts and used is not None and used > experts:
        raise BadInput(
            f"{where}: {used} experts per token, but only {experts} experts",
            "the file is damaged",
        )
    if shape.num_attention_heads > shape.hidden_size:
        raise BadInput(
            f"{where}: {shape.num_attention_heads} attention heads, more than the hidden size "
            f"({shape.hidden_size}) holds",
            "the file is damaged",
        )
    if shape.num_kv_heads > shape.num_attention_heads:
        raise BadInput(
            f"{where}: {shape.num_kv_heads} key/value heads, more than its "
            f"{shape.num_attention_heads} attention heads",
            "the file is damaged",
        )
    return shape


def bounded_count(value: Any, key: str, where: str, label: str) -> int:
    """A whole, non-negative number within the bound `config.json`'s `key` is held to
    (`_BOUNDS`), read from another format (a GGUF header's `label`).

    Raises:
        BadInput: naming `where` and `label`.
    """
    return _int({key: value}, key, where=where, label=label)


_WIDE = 2**20
_BOUNDS: dict[str, int] = {
    "num_hidden_layers": MAX_LAYERS,
    "hidden_size": 2**18,
    "num_attention_heads": 2**13,
    "num_key_value_heads": 2**13,
    "num_kv_heads": 2**13,
    "head_dim": 2**13,
    "vocab_size": 2**23,
    "max_position_embeddings": 2**28,
    "max_seq_len": 2**28,
    "seq_length": 2**28,
    "intermediate_size": _WIDE,
    "ffn_dim": _WIDE,
    "moe_intermediate_size": _WIDE,
    "shared_expert_intermediate_size": _WIDE,
    "intermediate_size_mlp": _WIDE,
    "num_local_experts": 2**14,
    "n_routed_experts": 2**14,
    "num_experts": 2**14,
    "num_experts_per_tok": 2**14,
    "experts_per_token": 2**14,
    "n_shared_experts": 2**10,
    "kv_lora_rank": 2**16,
    "q_lora_rank": 2**16,
    "qk_rope_head_dim": 2**13,
    "qk_nope_head_dim": 2**13,
    "v_head_dim": 2**13,
    "num_nextn_predict_layers": 2**8,
    "first_k_dense_replace": MAX_LAYERS,
    "moe_layer_freq": MAX_LAYERS,
    "decoder_sparse_step": MAX_LAYERS,
    "interleave_moe_layer_step": MAX_LAYERS,
    "sliding_window": 2**28,
    "attention_chunk_size": 2**28,
}
"""The largest value each whole number of a config may hold: every published model sits far
below (the widest hidden size is tens of thousands); a value above is a damaged or hostile
file, refused before any size is computed from it."""
_DEFAULT_BOUND = 2**31


def _int(
    body: dict[str, Any],
    key: str,
    *,
    default: int | None = None,
    where: str = "config.json",
    label: str | None = None,
) -> int:
    """A whole number of the config, within its domain's bound (`_BOUNDS`).

    Raises:
        BadInput: absent (with no default), not a whole number (a string, a
            boolean, NaN, infinite, a fraction), negative, or beyond its bound.
    """
    value = body.get(key, default)
    if value is None:
        raise BadInput(f"{where} has no {key}", "it is not a full model config")
    named = f"{where}: {label or key}"
    number = whole_number(value)
    if number is None:
        raise BadInput(f"{named} is {shown_value(value)}, not a whole number")
    if number < 0:
        raise BadInput(f"{named} is negative ({shown_value(value)})")
    bound = _BOUNDS.get(key, _DEFAULT_BOUND)
    if number > bound:
        raise BadInput(
            f"{named} is {shown_value(value)}, more than any model holds (at most {bound})",
            "the file is damaged",
        )
    return number


def _optional_int(body: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        if body.get(key) is not None:
            return _int(body, key)
    return None


def _positive_number(value: Any, key: str) -> float | None:
    """A positive number from the config, None when absent; BadInput when it is not one."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadInput(f"config.json: {key} is {shown_value(value)}, not a positive number")
    if isinstance(value, int) and value > _DEFAULT_BOUND:
        raise BadInput(f"config.json: {key} is {shown_value(value)}, more than any model holds")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadInput(f"config.json: {key} is {shown_value(value)}, not a positive number")
    if value <= 0 or value > _DEFAULT_BOUND:
        raise BadInput(f"config.json: {key} is {shown_value(value)}, not a positive number")
    return float(value)


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
    num_layers = _int(body, "num_hidden_layers")
    hidden = _int(body, "hidden_size")
    heads = _int(body, "num_attention_heads")
    if num_layers == 0 or hidden == 0 or heads == 0:
        raise BadInput("config.json has zero layers, hidden size or attention heads")
    if num_layers > MAX_LAYERS:
        raise BadInput(
            f"config.json: num_hidden_layers is {num_layers}, more than any model has",
            "the config is damaged",
        )
    kv_heads = _optional_int(body, "num_key_value_heads", "num_kv_heads")
    if kv_heads is None:
        kv_heads = heads
    if kv_heads == 0 or heads % kv_heads:
        raise BadInput(
            f"config.json: num_key_value_heads is {kv_heads}, which does not divide "
            f"num_attention_heads ({heads})",
            "the config is damaged",
        )
    head_dim = _optional_int(body, "head_dim")
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
    vocab = _int(body, "vocab_size")
    max_context = _optional_int(body, "max_position_embeddings", "max_seq_len", "seq_length")
    intermediate = _optional_int(body, "intermediate_size", "ffn_dim") or 4 * hidden

    num_experts = _optional_int(body, "num_local_experts", "n_routed_experts", "num_experts")
    experts_per_token = _optional_int(body, "num_experts_per_tok", "experts_per_token")
    if num_experts is not None and num_experts <= 1:
        num_experts, experts_per_token = None, None

    moe_intermediate = _optional_int(body, "moe_intermediate_size")
    shared_experts = _optional_int(body, "n_shared_experts") or 0
    shared_intermediate = _optional_int(body, "shared_expert_intermediate_size")
    dense_intermediate: int | None = None
    if num_experts and moe_intermediate is None:
        # Mixtral, gpt-oss, Llama 4: `intermediate_size` is each expert's width.
        moe_intermediate = intermediate
    if model_type == "llama4_text" and num_experts:
        shared_experts = 1
        shared_intermediate = intermediate
        dense_intermediate = _optional_int(body, "intermediate_size_mlp") or intermediate
    elif num_experts and model_type in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        dense_intermediate = intermediate
        if shared_experts and moe_intermediate:
            shared_intermediate = shared_experts * moe_intermediate
    elif num_experts and shared_intermediate:
        shared_experts = 1
    moe_layers = _moe_layers(body, num_layers, model_type) if num_experts else ()

    mla = None
    if body.get("kv_lora_rank"):
        mla = MlaShape(
            kv_lora_rank=_int(body, "kv_lora_rank"),
            qk_rope_head_dim=_int(body, "qk_rope_head_dim", default=64),
            qk_nope_head_dim=_int(body, "qk_nope_head_dim", default=128),
            v_head_dim=_int(body, "v_head_dim", default=128),
            q_lora_rank=_optional_int(body, "q_lora_rank"),
        )
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim

    layer_attention, sliding_window, chunk = _layer_pattern(body, num_layers, model_type)
    rope = body.get("rope_scaling")
    if rope is not None and not isinstance(rope, dict):
        raise BadInput(f"config.json: rope_scaling is {shown_value(rope)}, not an object")
    rope = rope or {}
    rope_type = rope.get("rope_type") or rope.get("type") if rope else None
    rope_factor = _positive_number(rope.get("factor"), "rope_scaling.factor") or 1.0
    rope_original = _positive_number(
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
        num_mtp_layers=_optional_int(body, "num_nextn_predict_layers") or 0,
        rope_type=str(rope_type) if isinstance(rope_type, str) else None,
        rope_factor=rope_factor,
        rope_original_max_position=int(rope_original) if rope_original else None,
        rotary_dim=rotary_dim,
        multimodal=multimodal,
    )


def _moe_layers(body: dict[str, Any], num_layers: int, model_type: str) -> tuple[bool, ...]:
    """Which layers carry routed experts, by each family's own keys."""
    first_dense = _optional_int(body, "first_k_dense_replace") or 0
    every = (
        _optional_int(body, "moe_layer_freq", "decoder_sparse_step", "interleave_moe_layer_step")
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


def _layer_pattern(
    body: dict[str, Any], num_layers: int, model_type: str
) -> tuple[tuple[str, ...], int | None, int | None]:
    """Per-layer attention kind, the window and the chunk, by each family's rule."""
    window = _optional_int(body, "sliding_window")
    chunk = _optional_int(body, "attention_chunk_size") if model_type == "llama4_text" else None
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
            interval = _optional_int(body, "no_rope_layer_interval") or 4
            kinds = [FULL if (i + 1) % interval == 0 else CHUNKED for i in range(num_layers)]
        return tuple(kinds), None, chunk
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        # Qwen ships a `sliding_window` value but disables it with use_sliding_window: false.
        if not body.get("use_sliding_window") or not window:
            return (FULL,) * num_layers, None, None
        first_windowed = _optional_int(body, "max_window_layers") or 0
        kinds = [SLIDING if i >= first_windowed else FULL for i in range(num_layers)]
        return tuple(kinds), window if SLIDING in kinds else None, None
    if model_type == "gemma3_text" and window:
        pattern = _optional_int(body, "sliding_window_pattern") or 6
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
        and window < (_optional_int(body, "max_position_embeddings") or 0)
    ):
        return (SLIDING,) * num_layers, window, None
    return (FULL,) * num_layers, None, None
