"""How a checkpoint's bytes land on the cards of a tensor × pipeline layout (pure).

The real file bytes are the anchor; the architecture's parameter count only
says how those bytes divide: which belong to each decoder layer (so pipeline
stages get their own layers' bytes — stages are uneven, the first holds the
embeddings and the last the output head), which an engine shards across
tensor ranks and which every rank keeps whole (norms, routers, and the K/V
projections once the width passes the KV heads).

Two more things reach the card beyond the files (vLLM's "Model loading took"):
the rotary-embedding cos/sin cache (positions × rotary width in the model's
dtype — 32 MiB for Llama-3.1's 131,072 positions, which is exactly why
Llama-3.1-8B loads 14.99 GiB from a 14.96 GiB checkpoint), and the change of
dtype when a float32 checkpoint is served in bfloat16 or a 16-bit one is
quantised to FP8 on load.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgw_core.model.params import (
    ParameterCount,
    count_parameters,
    dtype_bytes,
    weights_bytes_from_params,
)
from llmgw_core.model.quantization import Quantization
from llmgw_core.model.shape import ModelShape

VOCAB_PADDING = 64  # vLLM pads the vocabulary to a multiple of 64 before sharding it


def pipeline_stages(num_layers: int, pipeline_parallel: int) -> list[range]:
    """The layers of each pipeline stage, as vLLM partitions them.

    An even split; the remainder goes one layer each to the stages just
    before the last, which already carries the output head (vLLM `get_pp_indices`).
    """
    base = num_layers // pipeline_parallel
    sizes = [base] * pipeline_parallel
    for i in range(2, num_layers % pipeline_parallel + 2):
        sizes[-i] += 1
    stages, start = [], 0
    for size in sizes:
        stages.append(range(start, start + size))
        start += size
    return stages


def rope_cache_bytes(shape: ModelShape, serve_dtype: str) -> int:
    """Bytes of the rotary cos/sin cache(s) an engine builds at load.

    The cache holds one row of `rotary_dim` values per position: the trained
    context, times the factor for linear/dynamic scaling; YaRN-style scaling
    sizes it from the original context times the factor. Gemma 3 keeps a
    second, unscaled cache for its sliding layers.
    """
    rotary = shape.rotary_dim or shape.head_dim
    positions = shape.max_context
    kind = (shape.rope_type or "").lower()
    if kind in ("linear", "dynamic") and shape.rope_factor > 1:
        positions = int(shape.max_context * shape.rope_factor)
    elif kind in ("yarn", "deepseek_yarn") and shape.rope_original_max_position:
        positions = int(shape.rope_original_max_position * shape.rope_factor)
    total = positions * rotary * dtype_bytes(serve_dtype)
    if shape.model_type == "gemma3_text" and kind in ("linear", "dynamic"):
        total += shape.max_context * rotary * dtype_bytes(serve_dtype)
    return total


@dataclass(frozen=True)
class StageWeights:
    """One pipeline stage's weights on each of its tensor ranks, in bytes."""

    layers: range
    weights_bytes: int


def serve_dtype_for(shape: ModelShape, dtype: str | None) -> str:
    """The dtype an engine computes in: the one asked for, else the checkpoint's.

    A float32 checkpoint is served in bfloat16 unless float32 is asked for
    (vLLM's `--dtype auto` casts float32 configs down to 16 bits).
    """
    if dtype and dtype != "auto":
        return {"half": "float16", "float": "float32", "bf16": "bfloat16"}.get(dtype, dtype)
    return "bfloat16" if shape.dtype == "float32" else shape.dtype


def _kv_share(shape: ModelShape, tensor_parallel: int) -> float:
    """Fraction of the K/V projection weights one tensor rank holds (replicated past the KV heads)."""
    if shape.mla:
        return 1 / tensor_parallel
    per_rank = max(1, shape.num_kv_heads // tensor_parallel)
    return per_rank / shape.num_kv_heads


def stage_weights(
    shape: ModelShape,
    checkpoint_bytes: int,
    *,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    serve_dtype: str | None = None,
    serve_quantization: Quantization | None = None,
    expert_width_multiple: int = 1,
) -> list[StageWeights]:
    """Bytes of weights on one tensor rank of each pipeline stage.

    Args:
        shape: the model's shape.
        checkpoint_bytes: the real bytes of the weight files.
        tensor_parallel: tensor-parallel width.
        pipeline_parallel: pipeline stages.
        serve_dtype: the dtype served in (None: `serve_dtype_for(shape, None)`).
        serve_quantization: a quantisation applied at load (vLLM `--quantization fp8`)
            on a checkpoint that is not quantised.
        expert_width_multiple: kernels that pad each expert's intermediate width
            per rank up to a multiple (vLLM's MXFP4 MoE: 256) load more than the files hold.
    """
    params = count_parameters(shape)
    dtype = serve_dtype or serve_dtype_for(shape, None)
    on_disk = weights_bytes_from_params(params, shape)
    loaded_shape = shape
    if serve_quantization is not None and shape.quantization is None:
        loaded_shape = _with(shape, serve_quantization, dtype)
    elif shape.quantization is None:
        loaded_shape = _with(shape, None, dtype)
    # The files are the truth; the count only apportions them. `ratio` absorbs
    # what the count does not know (vision towers, odd biases), evenly; MTP
    # layers are in the files but not loaded, so they leave with the ratio.
    ratio = checkpoint_bytes / on_disk if on_disk else 1.0
    expert_growth = _expert_padding(shape, tensor_parallel, expert_width_multiple)
    parts = _served_parts(params, loaded_shape, tensor_parallel, pipeline_parallel, expert_growth)
    rope = rope_cache_bytes(shape, dtype)
    stages = []
    layer_ranges = pipeline_stages(shape.num_layers, pipeline_parallel)
    for index, layers in enumerate(layer_ranges):
        total = sum(parts.layer_per_rank[i] for i in layers)
        if index == 0:
            total += parts.embedding_per_rank
        if index == len(layer_ranges) - 1:
            total += parts.output_per_rank
        stages.append(StageWeights(layers=layers, weights_bytes=int(total * ratio) + rope))
    return stages


@dataclass(frozen=True)
class _Parts:
    embedding_per_rank: float
    output_per_rank: float
    layer_per_rank: list[float]
    total_unsharded: float


def _with(shape: ModelShape, quant: Quantization | None, dtype: str) -> ModelShape:
    from dataclasses import replace

    return replace(shape, quantization=quant, dtype=dtype)


def _expert_padding(shape: ModelShape, tensor_parallel: int, multiple: int) -> float:
    """How much larger experts get when their per-rank width is padded up to `multiple`."""
    width = shape.moe_intermediate_size
    if multiple <= 1 or not width or not shape.is_moe:
        return 1.0
    per_rank = -(-width // tensor_parallel)
    padded = -(-per_rank // multiple) * multiple
    return padded / per_rank


def _served_parts(
    params: ParameterCount,
    shape: ModelShape,
    tensor_parallel: int,
    pipeline_parallel: int,
    expert_growth: float = 1.0,
) -> _Parts:
    """Per-rank bytes of each part, before scaling to the real file bytes."""
    wide = dtype_bytes(shape.dtype)
    quant = shape.quantization
    qbytes = quant.bits / 8 if quant else wide
    att_bytes = wide if quant is None or quant.experts_only or quant.keeps_attention else qbytes
    mlp_bytes = wide if quant is None or quant.experts_only or quant.keeps_dense_mlp else qbytes
    kv_share = _kv_share(shape, tensor_parallel)
    # Attention weights split into q/o (sharded) and k/v (replicated past the KV heads).
    if shape.mla:
        kv_fraction = 0.0
    else:
        q_width = shape.num_attention_heads * shape.head_dim
        kv_width = 2 * shape.num_kv_heads * shape.head_dim
        kv_fraction = kv_width / (2 * q_width + kv_width)
    layer_per_rank = []
    total = 0.0
    for layer in params.layers:
        attention = layer.attention * att_bytes
        sharded = (
            attention * (1 - kv_fraction) / tensor_parallel + attention * kv_fraction * kv_share
        )
        sharded += (layer.dense_mlp + layer.shared_experts) * mlp_bytes / tensor_parallel
        sharded += layer.routed_experts * qbytes / tensor_parallel * expert_growth
        per_rank = sharded + layer.small * wide
        layer_per_rank.append(per_rank)
        total += (
            layer.attention * att_bytes
            + (layer.dense_mlp + layer.shared_experts) * mlp_bytes
            + layer.routed_experts * qbytes
            + layer.small * wide
        )
    hidden = shape.hidden_size
    padded_vocab = -(-shape.vocab_size // VOCAB_PADDING) * VOCAB_PADDING
    vocab_rows = -(-padded_vocab // tensor_parallel)
    embedding = vocab_rows * hidden * wide
    # A tied head still needs its own copy on the last stage when the embedding is elsewhere.
    has_head = bool(params.output) or pipeline_parallel > 1
    output = (vocab_rows * hidden * wide if has_head else 0) + params.final_norm * wide
    total += (params.embedding + params.output + params.final_norm) * wide
    return _Parts(
        embedding_per_rank=embedding,
        output_per_rank=output,
        layer_per_rank=layer_per_rank,
        total_unsharded=total,
    )
