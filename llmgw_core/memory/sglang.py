"""SGLang's memory at start-up, per tensor rank (pure).

SGLang sizes its KV pool from what is left after loading the weights
(`ModelRunner.profile_max_num_token`):

    rest = free memory after weights − card memory × (1 − mem_fraction_static)
    tokens = rest // cell bytes

so the `--mem-fraction-static` share holds weights + the KV pool, and the
remaining share is the headroom for activations and CUDA graphs. A cell is
`layers × kv_heads_per_rank × head_dim × 2 (K and V) × dtype bytes`; for MLA
it is `layers × (kv_lora_rank + qk_rope_head_dim) × dtype bytes`, the same on
every rank (the latent is replicated, as a DeepSeek-V3 TP2 run logs 0.65 GB
for 10,000 tokens on each rank). Checked on Qwen3-235B-A22B-FP8 at TP4 and
0.93 on H100: 367,404 tokens logged.

Models with sliding-window layers get a second, smaller pool; its share is
`swa_full_tokens_ratio` (0.8 by default).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgw_core.memory.kv_vllm import kv_dtype_bytes, kv_token_bytes
from llmgw_core.memory.need import CardNeed, NeedQuery
from llmgw_core.memory.weights import serve_dtype_for, stage_weights
from llmgw_core.model.artifacts import GIB
from llmgw_core.model.shape import SLIDING, ModelShape

INIT_SINGLE_GIB = 0.5
INIT_PARALLEL_GIB = 2.1  # CUDA context + NCCL / custom all-reduce buffers before the pool is sized
SWA_FULL_TOKENS_RATIO = 0.8


def default_mem_fraction_static(card_memory_gib: float, tensor_parallel: int) -> float:
    """SGLang's default `--mem-fraction-static` on large cards, by tensor width.

    0.88 alone, 0.87 at TP2, 0.85 at TP4, 0.81 at TP8 on cards over 60 GiB
    (SGLang 0.4 `server_args`; newer releases derive it from a reserved-memory
    estimate and land close to these). Smaller cards keep more headroom.
    """
    if card_memory_gib < 60:
        return 0.80 if card_memory_gib >= 20 else 0.70
    if tensor_parallel >= 16:
        return 0.79
    if tensor_parallel >= 8:
        return 0.81
    if tensor_parallel >= 4:
        return 0.85
    if tensor_parallel >= 2:
        return 0.87
    return 0.88


def cell_bytes(
    shape: ModelShape, tensor_parallel: int, kv_cache_dtype: str | None, serve_dtype: str
) -> tuple[int, int]:
    """Bytes per token of (full-attention layers, sliding layers) on one rank."""
    per_layer = int(
        kv_token_bytes(shape, kv_dtype_bytes(kv_cache_dtype, serve_dtype), tensor_parallel)
    )
    if shape.mla:
        return shape.num_layers * per_layer, 0
    sliding = shape.count_layers(SLIDING) if shape.sliding_window else 0
    return (shape.num_layers - sliding) * per_layer, sliding * per_layer


@dataclass(frozen=True)
class SglangEstimate:
    """SGLang's pool on one rank, GiB."""

    weights_gib: float
    init_gib: float
    reserve_gib: float
    kv_cache_gib: float
    kv_cache_tokens: int
    swa_tokens: int
    mem_fraction_static: float
    max_concurrency: float
    fits: bool
    reason: str | None


def estimate(
    shape: ModelShape,
    weights_bytes: int,
    *,
    gpu_memory_gib: float,
    tensor_parallel: int = 1,
    mem_fraction_static: float | None = None,
    max_model_len: int | None = None,
    kv_cache_dtype: str | None = None,
    dtype: str | None = None,
) -> SglangEstimate:
    """Predict SGLang's "KV Cache is allocated. #tokens: N" for one layout."""
    fraction = mem_fraction_static or default_mem_fraction_static(gpu_memory_gib, tensor_parallel)
    serve_dtype = serve_dtype_for(shape, dtype)
    (stage,) = stage_weights(
        shape, weights_bytes, tensor_parallel=tensor_parallel, serve_dtype=serve_dtype
    )
    init = INIT_SINGLE_GIB if tensor_parallel == 1 else INIT_PARALLEL_GIB
    weights = stage.weights_bytes / GIB
    rest = gpu_memory_gib * fraction - weights - init
    full, sliding = cell_bytes(shape, tensor_parallel, kv_cache_dtype, serve_dtype)
    if sliding:
        per_token = full + sliding * SWA_FULL_TOKENS_RATIO
    else:
        per_token = full
    tokens = int(max(0.0, rest) * GIB // per_token) if per_token else 0
    max_len = max_model_len or shape.max_context
    reason = None
    if rest <= 0:
        reason = "Not enough memory. Please try to increase --mem-fraction-static."
    elif tokens < max_len:
        reason = (
            f"the KV pool holds {tokens} tokens, fewer than one request of {max_len}: "
            "increase --mem-fraction-static or lower --context-length"
        )
    return SglangEstimate(
        weights_gib=weights,
        init_gib=init,
        reserve_gib=gpu_memory_gib * (1 - fraction),
        kv_cache_gib=max(0.0, rest),
        kv_cache_tokens=tokens,
        swa_tokens=int(tokens * SWA_FULL_TOKENS_RATIO) if sliding else 0,
        mem_fraction_static=fraction,
        max_concurrency=tokens / max_len if max_len else 0.0,
        fits=reason is None,
        reason=reason,
    )


def card_need(query: NeedQuery) -> CardNeed:
    """One rank's need under SGLang; activations and graphs live outside the usable share.

    Without an explicit `mem_fraction_static`, SGLang keeps its own default
    share (0.81–0.88 by width), not llmgw's 90 %: the difference is counted
    as engine memory so a fit here is a fit in SGLang.
    """
    artifact, shape, layout = query.artifact, query.shape, query.layout
    context, concurrency, usable_gib = query.context, query.concurrency, query.usable_gib
    kv_cache_dtype, card_memory_gib = query.kv_cache_dtype, query.card_memory_gib
    mem_fraction_static = query.gpu_memory_utilization
    tp = layout.tensor_parallel
    serve_dtype = serve_dtype_for(shape, None)
    stages = stage_weights(
        shape,
        artifact.size_bytes,
        tensor_parallel=tp,
        pipeline_parallel=layout.pipeline_parallel,
        serve_dtype=serve_dtype,
    )
    weights = max(s.weights_bytes for s in stages) / GIB
    full, sliding = cell_bytes(shape, tp, kv_cache_dtype, serve_dtype)
    layers_share = 1 / layout.pipeline_parallel
    window = min(context, shape.sliding_window or context)
    one = (full * context + sliding * window) * layers_share / GIB
    engine = INIT_SINGLE_GIB if layout.cards == 1 else INIT_PARALLEL_GIB
    if mem_fraction_static is None and card_memory_gib:
        own_share = card_memory_gib * default_mem_fraction_static(card_memory_gib, tp)
        engine += max(0.0, usable_gib - own_share)
    left = usable_gib - weights - engine
    return CardNeed(
        weights_gib=weights,
        context_gib=one * concurrency,
        engine_gib=engine,
        context_gib_per_1k_tokens=full * layers_share * 1000 / GIB,
        max_concurrency=left / one if left > 0 and one else None,
        usable_gib=usable_gib,
    )
