"""How a plan asks what fits, and what it says when nothing does (pure).

`Sizer` asks `llmgw_core.memory.card_need` once per distinct question and
compares it with `usable_gib`: the memory rules live there, the comparison
here. `Miss` remembers the widest try that still did not fit on each pool, so
that when nothing fits the plan can say what would change that: a shorter
context on that way, a smaller precision (an 8-bit or 4-bit version of the
weights), or more nodes than the pool has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from llmgw_core.engines.flags import ENGINE_NAMES
from llmgw_core.memory import CardNeed, Layout, card_need, usable_gib
from llmgw_core.memory.adapters import LoraSlots
from llmgw_core.memory.need import ENGINE_DEFAULTS, EngineOptions
from llmgw_core.model.artifacts import Artifact
from llmgw_core.model.shape import ModelShape
from llmgw_core.planner.pools import Pool
from llmgw_core.planner.ways import LLAMA_CPP, precision_rank_bits, uses_expert_parallel


@dataclass(frozen=True)
class Miss:
    """The widest try of one engine on one pool that still did not fit (for advice)."""

    overshoot: float
    engine: str
    artifact: Artifact
    shape: ModelShape
    pool: Pool
    tensor_parallel: int
    nodes: int


class Sizer:
    """Asks `card_need` once per distinct question within one plan, and compares with usable."""

    def __init__(
        self,
        context: int,
        concurrency: int,
        utilisation: float | None,
        kv_cache_dtype: str | None = None,
        enforce_eager: bool = False,
        engine_options: EngineOptions = ENGINE_DEFAULTS,
        adapters: LoraSlots | None = None,
    ) -> None:
        self.adapters = adapters
        self.context = context
        self.concurrency = concurrency
        self.utilisation = utilisation
        self.kv_cache_dtype = kv_cache_dtype
        self.enforce_eager = enforce_eager
        self.engine_options = engine_options
        self._needs: dict[tuple[Any, ...], CardNeed] = {}

    def need(
        self,
        engine: str,
        artifact: Artifact,
        shape: ModelShape,
        layout: Layout,
        card_memory_gib: float,
        *,
        context: int | None = None,
        cpu_repack: frozenset[str] | None = None,
    ) -> CardNeed:
        """What one card needs for this way (the plan's context unless `context` is given).

        `cpu_repack`: None on cards; on a CPU node, the tensor types its CPU repacks.
        """
        context = self.context if context is None else context
        key = (
            engine,
            id(artifact),
            artifact.size_bytes,
            layout,
            card_memory_gib,
            context,
            cpu_repack,
        )
        found = self._needs.get(key)
        if found is None:
            found = card_need(
                engine,
                artifact,
                shape,
                layout,
                context=context,
                concurrency=self.concurrency,
                card_memory_gib=card_memory_gib,
                gpu_memory_utilization=self.utilisation,
                kv_cache_dtype=self.kv_cache_dtype,
                enforce_eager=self.enforce_eager and engine == "vllm",
                cpu_only=cpu_repack is not None,
                engine_options=self.engine_options,
                repack_types=cpu_repack or frozenset(),
                adapters=self.adapters,
            )
            self._needs[key] = found
        return found

    def usable(self, engine: str, card_memory_gib: float) -> float:
        """What the engine may use of a card (or of a CPU node's RAM), GiB."""
        return usable_gib(engine, card_memory_gib, self.utilisation)

    def fits(
        self,
        engine: str,
        artifact: Artifact,
        shape: ModelShape,
        layout: Layout,
        memory: float,
        *,
        context: int | None = None,
        cpu_repack: frozenset[str] | None = None,
    ) -> bool:
        """True when what a card needs is within what the engine may use of it."""
        return self.need(
            engine, artifact, shape, layout, memory, context=context, cpu_repack=cpu_repack
        ).fits


def smallest_fitting(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """The smallest n in [low, high] with fits(n), assuming more n never hurts.

    Doubles from `low` until it fits, then halves the gap: a model that fits
    on two nodes costs two questions, not a search over a thousand.
    """
    if high < low:
        return None
    below, probe = low - 1, low
    while not fits(probe):
        if probe >= high:
            return None
        below, probe = probe, min(high, probe * 2)
    while probe - below > 1:
        middle = (below + probe) // 2
        if fits(middle):
            probe = middle
        else:
            below = middle
    return probe


def advice_when_nothing_fits(misses: list[Miss], sizer: Sizer, context: int) -> list[str]:
    """Sentences naming what would make a model fit that fits nowhere.

    Args:
        misses: the widest try of each engine on each pool, that did not fit.
        sizer: the plan's sizer (same context, concurrency and utilisation).
        context: the context planned, tokens.
    """
    if not misses:
        return ["a GPU node (these files need vLLM or SGLang), or a GGUF file of it for a CPU node"]
    advice: list[str] = []
    closest = min(misses, key=lambda m: m.overshoot)
    adapters = _adapter_term(misses, sizer)
    if adapters:
        advice.append(adapters)
    shorter = _largest_context(closest, sizer, context)
    where = _miss_label(closest)
    if shorter:
        advice.append(f"a context of {shorter} tokens (not {context}) on {where}")
    smaller = _smaller_precision(misses, sizer)
    if smaller:
        advice.append(smaller)
    more = _more_nodes(misses, sizer)
    if more:
        advice.append(more)
    if not advice:
        advice.append(f"more memory than {where} gives")
    return advice


def _layout_of(miss: Miss, nodes: int | None = None) -> tuple[Layout, float]:
    nodes = miss.nodes if nodes is None else nodes
    memory = miss.pool.device_memory_gib
    if miss.engine == LLAMA_CPP:
        return Layout(pipeline_parallel=nodes if not miss.pool.is_cpu else 1), memory
    if miss.pool.is_cpu:  # vLLM's CPU backend: a rank per NUMA node, sized in one's RAM
        return Layout(miss.tensor_parallel), miss.pool.rank_memory_gib(miss.tensor_parallel)
    ep = uses_expert_parallel(miss.engine, miss.shape, miss.tensor_parallel)
    return Layout(miss.tensor_parallel, nodes, ep), memory


def cpu_repack(pool: Pool) -> frozenset[str] | None:
    """None for a pool of cards; for CPU nodes, the tensor types their CPUs repack."""
    return pool.repack_types if pool.is_cpu else None


def _miss_label(miss: Miss) -> str:
    if miss.pool.is_cpu:
        return "a CPU node"
    cards = miss.tensor_parallel * miss.nodes
    if miss.nodes > 1:
        return f"{miss.nodes} nodes × {miss.tensor_parallel} × {miss.pool.label} on {miss.pool.interconnect}"
    return f"{cards} × {miss.pool.label}"


def _adapter_term(misses: list[Miss], sizer: Sizer) -> str | None:
    """When the model fits a way tried without its adapters: the adapters' room named, and the
    most adapter slots that way holds (the term that pushed it over)."""
    slots = sizer.adapters
    if slots is None:
        return None
    bare = Sizer(
        sizer.context,
        sizer.concurrency,
        sizer.utilisation,
        sizer.kv_cache_dtype,
        sizer.enforce_eager,
        sizer.engine_options,
    )
    for miss in sorted(misses, key=lambda m: m.overshoot):
        layout, memory = _layout_of(miss)
        repack = cpu_repack(miss.pool)
        if not bare.fits(miss.engine, miss.artifact, miss.shape, layout, memory, cpu_repack=repack):
            continue
        need = sizer.need(miss.engine, miss.artifact, miss.shape, layout, memory, cpu_repack=repack)
        term = (
            f"the adapters' {need.adapters_gib:.1f} GB a card under {ENGINE_NAMES[miss.engine]} "
            f"(max_loras {slots.max_loras} × max_lora_rank {slots.max_lora_rank}) push it over "
            f"on {_miss_label(miss)}, where it fits without them"
        )
        for fewer in range(slots.max_loras - 1, 0, -1):
            trial = Sizer(
                sizer.context,
                sizer.concurrency,
                sizer.utilisation,
                sizer.kv_cache_dtype,
                sizer.enforce_eager,
                sizer.engine_options,
                replace(slots, max_loras=fewer, max_cpu_loras=None),
            )
            if trial.fits(
                miss.engine, miss.artifact, miss.shape, layout, memory, cpu_repack=repack
            ):
                return f"{term}: max_loras {fewer} fits"
        return term
    return None


def _largest_context(miss: Miss, sizer: Sizer, context: int) -> int | None:
    """The largest context, in steps of 256 tokens, that fits the closest miss's way."""
    layout, memory = _layout_of(miss)
    step = 256

    def fits(steps: int) -> bool:
        return sizer.fits(
            miss.engine,
            miss.artifact,
            miss.shape,
            layout,
            memory,
            context=steps * step,
            cpu_repack=cpu_repack(miss.pool),
        )

    if not fits(1):
        return None
    low, high = 1, max(1, (context - 1) // step)
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low * step


def _smaller_precision(misses: list[Miss], sizer: Sizer) -> str | None:
    """An 8-bit, then a 4-bit, version of a 16-bit artifact, if one would fit a way tried."""
    for bits, what, on_cpu in (
        (8, "an 8-bit version (an FP8 repository, or a Q8_0 GGUF)", "a Q8_0 GGUF of it"),
        (4, "a 4-bit version (an AWQ or GPTQ repository, or a Q4_K_M GGUF)", "a Q4_K_M GGUF of it"),
    ):
        for miss in sorted(misses, key=lambda m: m.overshoot):
            have = precision_rank_bits(miss.artifact, miss.shape)
            if have <= bits:
                continue
            lighter = replace(miss.artifact, size_bytes=int(miss.artifact.size_bytes * bits / 16))
            layout, memory = _layout_of(miss)
            if sizer.fits(
                miss.engine, lighter, miss.shape, layout, memory, cpu_repack=cpu_repack(miss.pool)
            ):
                # vLLM's CPU backend is planned unquantised: on a CPU node a smaller
                # precision is a GGUF file for llama.cpp.
                return f"{on_cpu if miss.pool.is_cpu else what} on {_miss_label(miss)}"
    return None


def _more_nodes(misses: list[Miss], sizer: Sizer) -> str | None:
    """The fewest nodes of a spanning pool that would hold it, beyond those it has."""
    best: tuple[tuple[int, int], str] | None = None
    for miss in misses:
        if not miss.pool.spans_nodes or miss.engine == LLAMA_CPP or miss.pool.gpu_class is None:
            continue
        if miss.pool.gpu_class.is_mig:
            continue
        ceiling = min(miss.shape.num_layers, max(64, miss.nodes * 8))

        def fits(nodes: int, miss: Miss = miss) -> bool:
            layout, memory = _layout_of(miss, nodes)
            return sizer.fits(miss.engine, miss.artifact, miss.shape, layout, memory)

        nodes = smallest_fitting(fits, miss.nodes + 1, ceiling)
        if nodes is None:
            continue
        text = (
            f"{nodes} nodes of {miss.tensor_parallel} × {miss.pool.label} on one "
            f"{'NVLink domain' if miss.pool.interconnect_kind == 'nvlink-domain' else 'fabric'}"
            f" ({miss.pool.describe()} has {miss.nodes})"
        )
        if best is None or (nodes, nodes * miss.tensor_parallel) < best[0]:
            best = ((nodes, nodes * miss.tensor_parallel), text)
    return best[1] if best else None
