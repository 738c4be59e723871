"""vLLM V1's memory at start-up, predicted in the terms vLLM prints (pure).

vLLM's budget (`vllm/v1/worker/gpu_worker.py`, `vllm/utils` memory profiling):

    requested = card memory × gpu_memory_utilization
    available KV = requested − (weights + torch activation peak + non-torch increase)

measured after loading the weights and running one dummy forward of
`max_num_batched_tokens` tokens plus a sampler warm-up of `max_num_seqs`
dummy requests. The CUDA context and NCCL set-up made before that snapshot are
outside the budget, and so are CUDA graphs captured after the KV cache in
v0.19 (unless VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, which vLLM
announced as the next default: then graphs come out of the KV budget).

The non-KV terms are modelled from their mechanisms and calibrated on the
llm-d planner's v0.19.0 sweep on H100-80GB (Llama-3.1-8B at TP1/2/4 and PP2/4,
Qwen3-30B-A3B, Mixtral TP2, gemma-3-27b, DeepSeek-V2-Lite); see
`docs/memory-rules.md` for every rule's source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmgw_core.errors import BadInput
from llmgw_core.memory.kv_vllm import (
    BLOCK_SIZE,
    KvPool,
    estimated_max_model_len,
    kv_bytes_for,
    kv_pool,
    page_bytes,
)
from llmgw_core.memory.need import DEFAULT_USABLE_FRACTION, CardNeed, NeedQuery
from llmgw_core.memory.vllm_overheads import (
    NEWEST_KNOWN,
    activation_bytes,
    cuda_graph_gib,
    expert_width_multiple,
    init_gib,
    non_torch_gib,
)
from llmgw_core.memory.weights import (
    VOCAB_PADDING,
    pipeline_stages,
    serve_dtype_for,
    stage_weights,
)
from llmgw_core.model.artifacts import GIB
from llmgw_core.model.quantization import Quantization, online_fp8
from llmgw_core.model.shape import FULL, ModelShape


def parse_version(version: str | None) -> tuple[int, int, int]:
    """Read "0.19.0" as (0, 19, 0); None means the newest rules known."""
    if not version:
        return NEWEST_KNOWN
    numbers = [int(x) for x in version.lstrip("v").split("+")[0].split(".")[:3] if x.isdigit()]
    if not numbers:
        raise BadInput(f"engine_version {version!r} is not a version number", 'e.g. "0.19.0"')
    while len(numbers) < 3:
        numbers.append(0)
    return numbers[0], numbers[1], numbers[2]


def default_batching(card_memory_gib: float) -> tuple[int, int]:
    """vLLM's defaults for the OpenAI server: (max_num_batched_tokens, max_num_seqs).

    8192 / 1024 on cards of 70 GiB and more (H100, H200, B200), 2048 / 256 on
    smaller ones (vLLM's usage-context defaults, logged at start-up).
    """
    if card_memory_gib >= 70:
        return 8192, 1024
    return 2048, 256


@dataclass(frozen=True)
class StageEstimate:
    """One pipeline stage, per card (GiB)."""

    layers: tuple[int, int]
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    kv_cache_gib: float
    num_blocks: int


@dataclass(frozen=True)
class VllmEstimate:
    """What vLLM will print at start-up, per card (the first card, as the driver logs it).

    `kv_cache_tokens`, `kv_cache_blocks` and `max_concurrency` are the engine's
    figures: with pipeline stages vLLM keeps the smallest stage's block count.
    """

    requested_gib: float
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    init_gib: float
    kv_cache_gib: float
    kv_cache_tokens: int
    kv_cache_blocks: int
    max_concurrency: float
    kv_needed_gib: float
    fits: bool
    reason: str | None
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_cache_groups: int
    cuda_graphs_in_budget: bool
    stages: tuple[StageEstimate, ...] = field(default=())

    def as_result(self) -> dict[str, Any]:
        """The estimate as the `estimate` step prints it (GiB rounded to 2 places like vLLM)."""
        result: dict[str, Any] = {
            "requested_gib": round(self.requested_gib, 2),
            "weights_gib": round(self.weights_gib, 2),
            "activation_gib": round(self.activation_gib, 2),
            "non_torch_gib": round(self.non_torch_gib, 2),
            "cuda_graph_gib": round(self.cuda_graph_gib, 2),
            "init_gib": round(self.init_gib, 2),
            "kv_cache_gib": round(self.kv_cache_gib, 2),
            "kv_cache_tokens": self.kv_cache_tokens,
            "kv_cache_blocks": self.kv_cache_blocks,
            "max_concurrency": round(self.max_concurrency, 2),
            "kv_needed_gib": round(self.kv_needed_gib, 2),
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "kv_cache_groups": self.kv_cache_groups,
            "cuda_graphs_in_budget": self.cuda_graphs_in_budget,
            "fits": self.fits,
        }
        if self.reason:
            result["reason"] = self.reason
        if len(self.stages) > 1:
            result["stages"] = [
                {
                    "layers": list(s.layers),
                    "weights_gib": round(s.weights_gib, 2),
                    "activation_gib": round(s.activation_gib, 2),
                    "kv_cache_gib": round(s.kv_cache_gib, 2),
                    "kv_cache_blocks": s.num_blocks,
                }
                for s in self.stages
            ]
        return result


def _check_layout(shape: ModelShape, tensor_parallel: int, pipeline_parallel: int) -> str | None:
    """vLLM's own refusals of a layout, as it words them."""
    if tensor_parallel < 1 or pipeline_parallel < 1:
        return "tensor_parallel and pipeline_parallel must be at least 1."
    if shape.num_attention_heads % tensor_parallel:
        return (
            f"Total number of attention heads ({shape.num_attention_heads}) must be divisible "
            f"by tensor parallel size ({tensor_parallel})."
        )
    kv = shape.num_kv_heads
    if not shape.mla and (tensor_parallel % kv if tensor_parallel >= kv else kv % tensor_parallel):
        # vLLM asserts this in its QKV layer without a message; the sentence is ours.
        return (
            f"Total number of KV heads ({kv}) must be divisible by tensor parallel size "
            f"({tensor_parallel}), or the size by the heads."
        )
    padded_vocab = -(-shape.vocab_size // VOCAB_PADDING) * VOCAB_PADDING
    if padded_vocab % tensor_parallel:
        # vLLM's vocabulary sharding asserts "{padded} is not divisible by {tp}"
        return f"{padded_vocab} is not divisible by {tensor_parallel}"
    if pipeline_parallel > shape.num_layers:
        return (
            f"The number of hidden layers ({shape.num_layers}) is smaller than the "
            f"pipeline parallel size ({pipeline_parallel})."
        )
    return None


def estimate(
    shape: ModelShape,
    weights_bytes: int,
    *,
    gpu_memory_gib: float,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    gpu_memory_utilization: float = DEFAULT_USABLE_FRACTION,
    max_model_len: int | None = None,
    dtype: str | None = None,
    quantization: str | None = None,
    kv_cache_dtype: str | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    engine_version: str | None = None,
    estimate_cuda_graphs: bool | None = None,
    enforce_eager: bool = False,
    hybrid_kv_cache_manager: bool = True,
) -> VllmEstimate:
    """Predict vLLM's start-up memory lines for one layout.

    Args:
        shape: the model's shape.
        weights_bytes: the checkpoint's real weight bytes.
        gpu_memory_gib: one card's memory as CUDA reports it (H100-80GB: 79.19).
        tensor_parallel: `--tensor-parallel-size`.
        pipeline_parallel: `--pipeline-parallel-size`.
        gpu_memory_utilization: `--gpu-memory-utilization`.
        max_model_len: `--max-model-len`; None = the trained context.
        dtype: `--dtype` ("auto", "bfloat16", "float16", "float32").
        quantization: `--quantization` ("fp8" quantises a 16-bit checkpoint on load).
        kv_cache_dtype: `--kv-cache-dtype` ("auto", "fp8", "fp8_e5m2", "fp8_ds_mla").
        max_num_batched_tokens: `--max-num-batched-tokens`; None = vLLM's default for the card.
        max_num_seqs: `--max-num-seqs`; None = vLLM's default for the card.
        engine_version: vLLM version; None = the newest rules known (0.19).
        estimate_cuda_graphs: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS; None = the version's default.
        enforce_eager: `--enforce-eager` (no CUDA graphs).
        hybrid_kv_cache_manager: False = `--disable-hybrid-kv-cache-manager`.

    Raises:
        BadInput: for an argument vLLM itself would refuse to parse.
    """
    version = parse_version(engine_version)
    tp, pp = tensor_parallel, pipeline_parallel
    serve_dtype = serve_dtype_for(shape, dtype)
    if serve_dtype not in ("bfloat16", "float16", "float32"):
        raise BadInput(
            f"dtype {dtype!r} is not one vLLM accepts", "use auto, bfloat16, float16 or float32"
        )
    online: Quantization | None = None
    if quantization:
        if quantization != "fp8" and shape.quantization is None:
            raise BadInput(
                f"--quantization {quantization} needs a checkpoint quantised that way",
                "only fp8 quantises a 16-bit checkpoint on load",
            )
        if quantization == "fp8" and shape.quantization is None:
            online = online_fp8()
    default_tokens, default_seqs = default_batching(gpu_memory_gib)
    batched = max_num_batched_tokens or default_tokens
    seqs = max_num_seqs or default_seqs
    max_len = max_model_len or shape.max_context
    graphs_in_budget = (
        estimate_cuda_graphs if estimate_cuda_graphs is not None else version > NEWEST_KNOWN
    )
    requested = gpu_memory_gib * gpu_memory_utilization
    start_init = init_gib(tp, pp)
    refusal = _check_layout(shape, tp, pp)
    if refusal is None and max_len > shape.max_context:
        refusal = (
            f"User-specified max_model_len ({max_len}) is greater than the derived max_model_len "
            f"(max_position_embeddings={shape.max_context} in model's config.json). "
            "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    if tp < 1 or pp < 1:
        raise BadInput("tensor_parallel and pipeline_parallel must be at least 1")
    pp = min(pp, shape.num_layers)  # still size the stages; the refusal says why it cannot start

    weights = stage_weights(
        shape,
        weights_bytes,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        serve_dtype=serve_dtype,
        serve_quantization=online,
        expert_width_multiple=expert_width_multiple(shape),
    )
    stages: list[StageEstimate] = []
    pools: list[KvPool] = []
    available_by_stage: list[int] = []
    for index, stage in enumerate(weights):
        last = index == len(weights) - 1
        activation = activation_bytes(
            shape,
            tensor_parallel=tp,
            max_num_batched_tokens=batched,
            max_num_seqs=seqs,
            serve_dtype=serve_dtype,
            last_stage=last,
            version=version,
        )
        non_torch = non_torch_gib(tp, pp) * GIB
        graphs = 0.0 if enforce_eager else cuda_graph_gib(shape, len(stage.layers), tp)
        available = requested * GIB - stage.weights_bytes - activation - non_torch
        if graphs_in_budget:
            available -= graphs * GIB
        available_bytes = int(available)
        available_by_stage.append(available_bytes)
        pool = kv_pool(
            shape,
            stage.layers,
            available_bytes=max(0, available_bytes),
            tensor_parallel=tp,
            max_model_len=max_len,
            max_num_batched_tokens=batched,
            kv_cache_dtype=kv_cache_dtype,
            serve_dtype=serve_dtype,
            hybrid_manager=hybrid_kv_cache_manager,
        )
        pools.append(pool)
        stages.append(
            StageEstimate(
                layers=(stage.layers.start, stage.layers.stop),
                weights_gib=stage.weights_bytes / GIB,
                activation_gib=activation / GIB,
                non_torch_gib=non_torch / GIB,
                cuda_graph_gib=graphs,
                kv_cache_gib=available / GIB,
                num_blocks=pool.num_blocks,
            )
        )
    worst = min(range(len(pools)), key=lambda i: pools[i].num_blocks)
    blocks = pools[worst].num_blocks
    pool = pools[worst]
    first = stages[0]
    tokens = blocks // len(pool.groups.groups) * BLOCK_SIZE
    concurrency = blocks / pool.pages_per_request if pool.pages_per_request else 0.0
    needed = max(p.bytes_per_request for p in pools)
    reason = refusal or _refusal(
        shape,
        weights=weights,
        stages=stages,
        pools=pools,
        available_by_stage=available_by_stage,
        requested_gib=requested,
        gpu_memory_gib=gpu_memory_gib,
        gpu_memory_utilization=gpu_memory_utilization,
        init=start_init,
        graphs_in_budget=graphs_in_budget,
        max_len=max_len,
        tp=tp,
        batched=batched,
        kv_cache_dtype=kv_cache_dtype,
        serve_dtype=serve_dtype,
    )
    return VllmEstimate(
        requested_gib=requested,
        weights_gib=first.weights_gib,
        activation_gib=first.activation_gib,
        non_torch_gib=first.non_torch_gib,
        cuda_graph_gib=first.cuda_graph_gib,
        init_gib=start_init,
        kv_cache_gib=max(0.0, first.kv_cache_gib),
        kv_cache_tokens=tokens if reason is None else 0,
        kv_cache_blocks=blocks if reason is None else 0,
        max_concurrency=concurrency if reason is None else 0.0,
        kv_needed_gib=needed / GIB,
        fits=reason is None,
        reason=reason,
        max_num_batched_tokens=batched,
        max_num_seqs=seqs,
        kv_cache_groups=len(pool.groups.groups),
        cuda_graphs_in_budget=graphs_in_budget,
        stages=tuple(stages),
    )


def _refusal(
    shape: ModelShape,
    *,
    weights: list[Any],
    stages: list[StageEstimate],
    pools: list[KvPool],
    available_by_stage: list[int],
    requested_gib: float,
    gpu_memory_gib: float,
    gpu_memory_utilization: float,
    init: float,
    graphs_in_budget: bool,
    max_len: int,
    tp: int,
    batched: int,
    kv_cache_dtype: str | None,
    serve_dtype: str,
) -> str | None:
    """The first way start-up fails, in vLLM's words; None when it starts."""
    free_at_start = gpu_memory_gib - init
    if free_at_start < requested_gib:
        return (
            f"Free memory on device cuda:0 ({free_at_start:.2f}/{gpu_memory_gib:.2f} GiB) on startup "
            f"is less than desired GPU memory utilization ({gpu_memory_utilization}, "
            f"{requested_gib:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory "
            "used by other processes."
        )
    heaviest = max(stages, key=lambda s: s.weights_gib)
    if heaviest.weights_gib > free_at_start:
        return (
            f"CUDA out of memory while loading the weights: each card needs "
            f"{heaviest.weights_gib:.2f} GiB of weights but only {free_at_start:.2f} GiB is free."
        )
    for stage, available, pool in zip(stages, available_by_stage, pools, strict=True):
        if available <= 0 or pool.num_blocks == 0:
            return (
                "No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine."
            )
        if pool.bytes_per_request > available:
            layers = range(*stage.layers)
            longest = estimated_max_model_len(
                shape,
                layers,
                available_bytes=available,
                tensor_parallel=tp,
                max_num_batched_tokens=batched,
                kv_cache_dtype=kv_cache_dtype,
                serve_dtype=serve_dtype,
                upper=max_len,
            )
            return (
                f"To serve at least one request with the model's max seq len ({max_len}), "
                f"({pool.bytes_per_request / GIB:.2f} GiB KV cache is needed, which is larger "
                f"than the available KV cache memory ({available / GIB:.2f} GiB). Based on the "
                f"available memory, the estimated maximum model length is {longest}. Try "
                "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                "initializing the engine."
            )
    if not graphs_in_budget:
        graphs = max(s.cuda_graph_gib for s in stages)
        if init + requested_gib + graphs > gpu_memory_gib:
            return (
                f"CUDA out of memory while capturing CUDA graphs: {graphs:.2f} GiB of graphs do "
                f"not fit beside the {requested_gib:.2f} GiB budget and {init:.2f} GiB of CUDA "
                f"context on a {gpu_memory_gib:.2f} GiB card. Lower `gpu_memory_utilization` "
                "or pass --enforce-eager."
            )
    return None


def card_need(query: NeedQuery) -> CardNeed:
    """What the worst card needs under vLLM, for the planner.

    The engine part is what vLLM itself subtracts from its budget before the
    KV cache (activation peak, non-torch buffers); the CUDA context and, up to
    0.19, the CUDA graphs sit outside the budget and are checked against the
    rest of the card, as vLLM's own start-up would find them.
    """
    artifact, shape, layout = query.artifact, query.shape, query.layout
    context, concurrency, usable_gib = query.context, query.concurrency, query.usable_gib
    kv_cache_dtype, engine_version = query.kv_cache_dtype, query.engine_version
    card_memory_gib = query.card_memory_gib
    tp, pp = layout.tensor_parallel, layout.pipeline_parallel
    if _check_layout(shape, tp, pp):
        raise BadInput(str(_check_layout(shape, tp, pp)))
    version = parse_version(engine_version)
    # Up to 0.19 vLLM captures CUDA graphs after sizing the KV cache, outside
    # its budget; later versions count them in (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS).
    graphs_inside = version > NEWEST_KNOWN
    serve_dtype = serve_dtype_for(shape, None)
    memory = card_memory_gib or usable_gib / DEFAULT_USABLE_FRACTION
    batched, seqs = default_batching(memory)
    batched = query.engine_options.max_num_batched_tokens or batched
    online = None
    if artifact.quantization is not None and shape.quantization is None:
        online = artifact.quantization if artifact.quantization.vllm_flag == "fp8" else None
    weights = stage_weights(
        shape,
        artifact.size_bytes,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        serve_dtype=serve_dtype,
        serve_quantization=online,
        expert_width_multiple=expert_width_multiple(shape),
    )
    stages = pipeline_stages(shape.num_layers, pp)
    worst_total = -1.0
    result = None
    for index, (stage, layers) in enumerate(zip(weights, stages, strict=True)):
        activation = activation_bytes(
            shape,
            tensor_parallel=tp,
            max_num_batched_tokens=batched,
            max_num_seqs=seqs,
            serve_dtype=serve_dtype,
            last_stage=index == len(stages) - 1,
            version=version,
        )
        graphs = 0.0 if query.enforce_eager else cuda_graph_gib(shape, len(layers), tp)
        engine = activation / GIB + non_torch_gib(tp, pp) + (graphs if graphs_inside else 0.0)
        outside = init_gib(tp, pp) + (0.0 if graphs_inside else graphs)
        kv_args = dict(
            tensor_parallel=tp,
            max_num_batched_tokens=batched,
            kv_cache_dtype=kv_cache_dtype,
            serve_dtype=serve_dtype,
        )
        context_bytes = kv_bytes_for(
            shape, layers, tokens=context, sequences=concurrency, **kv_args
        )
        one = kv_bytes_for(shape, layers, tokens=context, sequences=1, **kv_args)
        weights_gib = stage.weights_bytes / GIB
        total = weights_gib + context_bytes / GIB + engine
        if total > worst_total:
            worst_total = total
            left = usable_gib - weights_gib - engine
            per_1k = _full_layer_bytes_per_token(shape, layers, tp, kv_cache_dtype, serve_dtype)
            result = CardNeed(
                weights_gib=weights_gib,
                context_gib=context_bytes / GIB,
                engine_gib=engine,
                context_gib_per_1k_tokens=per_1k * 1000 / GIB,
                max_concurrency=(left * GIB / one) if left > 0 and one else None,
                usable_gib=usable_gib,
                outside_gib=outside,
                card_memory_gib=card_memory_gib,
            )
    assert result is not None
    return result


def _full_layer_bytes_per_token(
    shape: ModelShape, layers: range, tp: int, kv_cache_dtype: str | None, serve_dtype: str
) -> float:
    """KV bytes one more token costs: only layers that keep the whole context grow."""
    growing = sum(1 for i in layers if shape.layer_attention[i] == FULL)
    return growing * page_bytes(shape, tp, kv_cache_dtype, serve_dtype) / BLOCK_SIZE
