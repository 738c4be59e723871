"""Whole numbers of a model config, each held to its bound (pure).

Every count `config.json` gives (layers, widths, heads, experts, windows) is
read through `config_int`, which refuses what is not a whole number, is
negative, or is larger than any published model holds; a GGUF header's
counts are held to the same bounds through `bounded_count`.
"""

from __future__ import annotations

import math
from typing import Any

from llmgw_core.errors import BadInput, shown_value
from llmgw_core.model.numbers import whole_number

MAX_LAYERS = 10_000  # a sanity bound: the deepest published models have a few hundred


def bounded_count(value: Any, key: str, where: str, label: str) -> int:
    """A whole, non-negative number within the bound `config.json`'s `key` is held to
    (`_BOUNDS`), read from another format (a GGUF header's `label`).

    Raises:
        BadInput: naming `where` and `label`.
    """
    return config_int({key: value}, key, where=where, label=label)


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


def config_int(
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


def optional_config_int(body: dict[str, Any], *keys: str) -> int | None:
    """The first of `keys` the config gives, read by `config_int`; None when none is."""
    for key in keys:
        if body.get(key) is not None:
            return config_int(body, key)
    return None


def positive_config_number(value: Any, key: str) -> float | None:
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
