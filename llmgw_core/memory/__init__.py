"""What one card needs to serve a model, by each engine's own rules (pure).

`card_need` is the planner's single entry: weights, context (KV cache) and
engine overheads for the worst card of a layout. The engines' rules live in
`vllm.py`, `sglang.py` and `llamacpp.py`; the usable fraction of a card lives
in `usable_gib` and nowhere else. All figures are GiB (2^30 bytes), which the
engines print under the label "GB".
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from llmgw_core.errors import BadInput
from llmgw_core.memory.need import (
    DEFAULT_USABLE_FRACTION,
    ENGINE_DEFAULTS,
    CardNeed,
    EngineOptions,
    Layout,
    NeedQuery,
)
from llmgw_core.model.artifacts import Artifact
from llmgw_core.model.shape import ModelShape

if TYPE_CHECKING:
    from llmgw_core.memory.adapters import LoraSlots

ENGINES = ("vllm", "sglang", "llama.cpp")

__all__ = ["DEFAULT_USABLE_FRACTION", "ENGINES", "CardNeed", "Layout", "card_need", "usable_gib"]


def usable_gib(
    engine: str, card_memory_gib: float, gpu_memory_utilization: float | None = None
) -> float:
    """The memory of a card an engine may use: 90 % by default, else the engine's own fraction.

    vLLM's `--gpu-memory-utilization`, SGLang's `--mem-fraction-static` and,
    for llama.cpp, the share of RAM or VRAM the operator allows are all passed
    as `gpu_memory_utilization`.
    """
    if engine not in ENGINES:
        raise BadInput(f"engine {engine!r} is not known", f"use one of {', '.join(ENGINES)}")
    fraction = DEFAULT_USABLE_FRACTION if gpu_memory_utilization is None else gpu_memory_utilization
    if not 0 < fraction <= 1:
        raise BadInput(f"gpu_memory_utilization {fraction} is not between 0 and 1")
    return card_memory_gib * fraction


def card_need(
    engine: str,
    artifact: Artifact,
    shape: ModelShape,
    layout: Layout,
    *,
    context: int,
    concurrency: int = 1,
    card_memory_gib: float,
    gpu_memory_utilization: float | None = None,
    kv_cache_dtype: str | None = None,
    engine_version: str | None = None,
    cpu_only: bool = False,
    enforce_eager: bool = False,
    engine_options: EngineOptions = ENGINE_DEFAULTS,
    repack_types: frozenset[str] = frozenset(),
    adapters: LoraSlots | None = None,
) -> CardNeed:
    """What the worst card of `layout` needs to serve `artifact` with `engine`.

    Args:
        engine: "vllm" | "sglang" | "llama.cpp".
        artifact: the weights served (their real bytes).
        shape: the model's shape (for a GGUF artifact, its header's shape when read).
        layout: tensor / pipeline parallel widths (llama.cpp: pipeline = devices of a layer split).
        context: tokens of context per sequence.
        concurrency: sequences of `context` served at once.
        card_memory_gib: the card's memory as CUDA reports it (for llama.cpp on a CPU node, RAM).
        gpu_memory_utilization: the engine's usable fraction; None = 90 %.
        kv_cache_dtype: "auto" / None (the model's dtype), "fp8", "f16", "q8_0" ...
        engine_version: the engine's version; None = the newest rules known.
        cpu_only: a CPU node. llama.cpp: everything (embeddings too) in RAM, no
            CUDA context, `card_memory_gib` the node's RAM; vLLM's CPU backend:
            one rank per NUMA node, `card_memory_gib` one NUMA node's RAM.
        enforce_eager: vLLM without CUDA graphs (`--enforce-eager`).
        engine_options: the engine flags that size memory beyond those above, as launched.
        repack_types: llama.cpp on a CPU node: the types its CPU repacks (a second copy).
        adapters: LoRA adapters served beside the model (`memory.adapters`), None for none.
    """
    query = NeedQuery(
        artifact=artifact,
        shape=shape,
        layout=layout,
        context=context,
        concurrency=concurrency,
        usable_gib=usable_gib(engine, card_memory_gib, gpu_memory_utilization),
        card_memory_gib=card_memory_gib,
        gpu_memory_utilization=gpu_memory_utilization,
        kv_cache_dtype=kv_cache_dtype,
        engine_version=engine_version,
        cpu_only=cpu_only,
        enforce_eager=enforce_eager,
        engine_options=engine_options,
        repack_types=repack_types,
        adapters=adapters,
    )
    return _with_adapters(engine, query, _engine_need(engine, query))


def _engine_need(engine: str, query: NeedQuery) -> CardNeed:
    if engine == "vllm" and query.cpu_only:
        from llmgw_core.memory import vllm_cpu

        return vllm_cpu.card_need(query)
    if engine == "vllm":
        from llmgw_core.memory import vllm

        return vllm.card_need(query)
    if engine == "sglang":
        from llmgw_core.memory import sglang

        return sglang.card_need(query)
    from llmgw_core.memory import llamacpp

    return llamacpp.card_need(query)


def _with_adapters(engine: str, query: NeedQuery, need: CardNeed) -> CardNeed:
    """`need` with the adapters' room added: it comes out of what the KV cache could have held
    (every engine allocates it before sizing the cache), except vLLM on a CPU node, whose
    cache is the fixed `VLLM_CPU_KVCACHE_SPACE`."""
    if query.adapters is None:
        return need
    from llmgw_core.memory.adapters import card_bytes, host_bytes
    from llmgw_core.memory.weights import serve_dtype_for
    from llmgw_core.model.artifacts import GIB

    layout = query.layout
    devices = 1 if query.cpu_only else layout.cards
    adapters = (
        card_bytes(
            engine,
            query.shape,
            query.adapters,
            tensor_parallel=layout.tensor_parallel,
            pipeline_parallel=1 if engine == "llama.cpp" else layout.pipeline_parallel,
            serve_dtype=serve_dtype_for(query.shape, None),
            devices=devices,
        )
        / GIB
    )
    concurrency = need.max_concurrency
    if concurrency is not None and not (engine == "vllm" and query.cpu_only):
        left = need.usable_gib - need.weights_gib - need.engine_gib
        concurrency = concurrency * (left - adapters) / left if left > adapters else None
    return replace(
        need,
        adapters_gib=adapters,
        adapters_host_gib=host_bytes(engine, query.adapters) / GIB,
        max_concurrency=concurrency,
    )
