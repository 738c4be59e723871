"""Every way one engine runs one artifact on one pool, sized and built (pure).

For each pool the planner asks here: a card that cannot load the artifact
is noted and skipped; llama.cpp splits a GGUF file by layer over the fewest
cards of one node that hold it; vLLM and SGLang try each tensor width the
heads allow on one node, then on the fewest nodes that fit where that takes
fewer cards; a CPU node is sized in its RAM — llama.cpp in all of it, vLLM's
CPU backend a rank per NUMA node, over the fewest NUMA nodes that hold it.
What did not fit is kept as a `Miss`, for the advice when nothing fits.
"""

from __future__ import annotations

import shlex

from llmgw_core.engines.environment import CPU_KV_VARIABLE
from llmgw_core.engines.planned import lora_launch, planned_argv
from llmgw_core.memory import Layout
from llmgw_core.model.artifacts import Artifact
from llmgw_core.model.model_shape import ModelShape
from llmgw_core.planner.fit import Miss, Sizer, cpu_repack, smallest_fitting
from llmgw_core.planner.gpu_classes import GpuClass
from llmgw_core.planner.pools import Pool
from llmgw_core.planner.way_record import (
    CPU_NODE,
    ONE_CARD,
    ONE_NODE,
    SEVERAL_NODES,
    Way,
    gguf_source,
)
from llmgw_core.planner.ways import (
    LLAMA_CPP,
    VLLM,
    dtype_flag,
    load_refusal,
    precision_label,
    precision_rank_bits,
    quantization_flag,
    tensor_widths,
    uses_expert_parallel,
)


def ways_on_pool(
    engine: str,
    artifact: Artifact,
    shape: ModelShape,
    pool: Pool,
    ref: str,
    sizer: Sizer,
    misses: list[Miss],
    notes: list[str],
) -> list[Way]:
    """Every way `engine` runs `artifact` on `pool`: for each width, the fewest nodes that fit."""
    card = pool.gpu_class
    refusal = load_refusal(engine, artifact, shape, card)
    if refusal is not None:
        if card is not None or engine == LLAMA_CPP:
            notes.append(f"{pool.describe()}: {refusal}")
        return []
    if pool.is_cpu:
        if engine == VLLM:
            return _vllm_cpu_way(artifact, shape, pool, ref, sizer, misses)
        return _cpu_way(artifact, shape, pool, ref, sizer, misses)
    assert card is not None
    memory = card.memory_gib
    ways: list[Way] = []
    if engine == LLAMA_CPP:
        most = 1 if card.is_mig else max(pool.card_counts(free_only=False), default=0)
        count = smallest_fitting(
            lambda k: sizer.fits(engine, artifact, shape, Layout(pipeline_parallel=k), memory),
            1,
            most,
        )
        if count is None:
            _miss(
                misses,
                sizer,
                engine,
                artifact,
                shape,
                pool,
                1,
                1,
                Layout(pipeline_parallel=max(most, 1)),
            )
            return []
        free = pool.nodes_with(count, free_only=True, nvlink=False) >= 1
        return [_way(engine, artifact, shape, pool, ref, sizer, 1, count, 1, free)]
    over_pcie = False
    if card.is_mig:
        widths: tuple[int, ...] = (1,)
        notes.append(
            f"{pool.describe()}: a MIG instance serves a replica alone, never with another"
        )
    else:
        widest = max(pool.nvlink_widths(free_only=False), default=1)
        most = max(pool.card_counts(free_only=False), default=0)
        if widest == 1 and most > 1:
            over_pcie = True
            widest = most
            notes.append(
                f"{pool.describe()}: its cards share no NVLink, so tensor parallel there runs"
                " over PCIe — peer to peer under one PCIe switch, through host memory across"
                " host bridges — slower than NVLink; a model that fits fewer cards is better"
            )
        widths = tensor_widths(shape, widest, artifact.quantization)

    def fits(width: int, nodes: int) -> bool:
        ep = uses_expert_parallel(engine, shape, width)
        return sizer.fits(engine, artifact, shape, Layout(width, nodes, ep), memory)

    nvlink = not over_pcie
    one_node = [width for width in widths if fits(width, 1)]
    for width in one_node:
        free = pool.nodes_with(width, free_only=True, nvlink=nvlink) >= 1
        ways.append(_way(engine, artifact, shape, pool, ref, sizer, width, 1, 1, free, over_pcie))
    if not pool.spans_nodes or card.is_mig:
        if not one_node and widths:
            _record_miss(misses, sizer, engine, artifact, shape, pool, widths[-1], 1)
        return ways
    # Several nodes only where that takes fewer cards than one node would — a
    # way with as many cards spread over more nodes is never better — or, when
    # no one-node way is free now, where the cards free on several nodes run it.
    fewest_cards = min(one_node, default=None)
    one_node_free = any(way.free_now for way in ways)
    for width in widths:
        if width in one_node:
            continue
        node_limit = min(pool.nodes_with(width, free_only=False, nvlink=nvlink), shape.num_layers)
        if fewest_cards is not None and one_node_free:
            node_limit = min(node_limit, (fewest_cards - 1) // width)
        nodes = smallest_fitting(lambda n, width=width: fits(width, n), 2, node_limit)
        if nodes is None:
            if fewest_cards is None:
                _record_miss(
                    misses, sizer, engine, artifact, shape, pool, width, max(node_limit, 1)
                )
            continue
        free = pool.nodes_with(width, free_only=True, nvlink=nvlink) >= nodes
        if fewest_cards is not None and width * nodes >= fewest_cards and not free:
            continue
        ways.append(
            _way(engine, artifact, shape, pool, ref, sizer, width, 1, nodes, free, over_pcie)
        )
    return ways


def _miss(
    misses: list[Miss],
    sizer: Sizer,
    engine: str,
    artifact: Artifact,
    shape: ModelShape,
    pool: Pool,
    width: int,
    nodes: int,
    layout: Layout,
) -> None:
    memory = pool.device_memory_gib
    need = sizer.need(engine, artifact, shape, layout, memory, cpu_repack=cpu_repack(pool))
    usable = sizer.usable(engine, memory)
    overshoot = need.total_gib / usable if usable > 0 else float("inf")
    misses.append(Miss(overshoot, engine, artifact, shape, pool, width, nodes))


def _record_miss(
    misses: list[Miss],
    sizer: Sizer,
    engine: str,
    artifact: Artifact,
    shape: ModelShape,
    pool: Pool,
    width: int,
    nodes: int,
) -> None:
    """Remember the widest tensor-parallel try on a pool that did not fit."""
    layout = Layout(width, nodes, uses_expert_parallel(engine, shape, width))
    _miss(misses, sizer, engine, artifact, shape, pool, width, nodes, layout)


def _cpu_way(
    artifact: Artifact, shape: ModelShape, pool: Pool, ref: str, sizer: Sizer, misses: list[Miss]
) -> list[Way]:
    ram = pool.device_memory_gib
    if not sizer.fits(LLAMA_CPP, artifact, shape, Layout(), ram, cpu_repack=cpu_repack(pool)):
        _miss(misses, sizer, LLAMA_CPP, artifact, shape, pool, 1, 1, Layout())
        return []
    return [_way(LLAMA_CPP, artifact, shape, pool, ref, sizer, 1, 1, 1, True)]


def _vllm_cpu_way(
    artifact: Artifact, shape: ModelShape, pool: Pool, ref: str, sizer: Sizer, misses: list[Miss]
) -> list[Way]:
    """vLLM on a CPU node: the fewest NUMA nodes (one rank each) whose RAM holds it."""
    widths = tensor_widths(shape, pool.numa_count)
    for width in widths:
        memory = pool.rank_memory_gib(width)
        if memory and sizer.fits(VLLM, artifact, shape, Layout(width), memory, cpu_repack=_NONE):
            return [_way(VLLM, artifact, shape, pool, ref, sizer, width, 1, 1, True)]
    widest = widths[-1] if widths else 1
    memory = pool.rank_memory_gib(widest)
    need = sizer.need(VLLM, artifact, shape, Layout(widest), memory, cpu_repack=_NONE)
    usable = sizer.usable(VLLM, memory)
    overshoot = need.total_gib / usable if usable > 0 else float("inf")
    misses.append(Miss(overshoot, VLLM, artifact, shape, pool, widest, 1))
    return []


_NONE: frozenset[str] = frozenset()
"""vLLM on a CPU repacks nothing; an empty set (not None) asks the CPU rule."""


def _way(
    engine: str,
    artifact: Artifact,
    shape: ModelShape,
    pool: Pool,
    ref: str,
    sizer: Sizer,
    width: int,
    layer_split: int,
    nodes: int,
    free_now: bool,
    over_pcie: bool = False,
) -> Way:
    """Build the way of `width` × `nodes` (or a llama.cpp split over `layer_split` cards).

    `over_pcie`: the pool's cards share no NVLink, so a tensor-parallel group
    talks over PCIe (said in the layout, and placement needs no NVLink).
    """
    card: GpuClass | None = pool.gpu_class
    on_cpu = card is None
    vllm_on_cpu = on_cpu and engine == VLLM
    memory = pool.rank_memory_gib(width) if vllm_on_cpu else pool.device_memory_gib
    expert = uses_expert_parallel(engine, shape, width)
    pipeline = layer_split if engine == LLAMA_CPP else nodes
    layout = Layout(width, pipeline, expert)
    repack = _NONE if vllm_on_cpu else cpu_repack(pool)
    need = sizer.need(engine, artifact, shape, layout, memory, cpu_repack=repack)
    usable = sizer.usable(engine, memory)
    cards = 0 if on_cpu else width * pipeline
    gguf = artifact.format == "gguf"
    source = gguf_source(ref, artifact.files[0]) if gguf and artifact.files else ref
    flag = quantization_flag(artifact, engine)
    kv_space = int(need.context_gib) if vllm_on_cpu else None
    serve = shlex.join(
        planned_argv(
            engine,
            source,
            context=sizer.context,
            tensor_parallel=width,
            pipeline_parallel=pipeline,
            expert_parallel=expert,
            quantization_flag=flag,
            gpu_memory_utilization=None if on_cpu or gguf else round(usable / memory, 2),
            dtype_flag=dtype_flag(engine, artifact, shape, card),
            concurrency=sizer.concurrency,
            on_cpu=on_cpu,
            engine_options=sizer.engine_options,
            lora=lora_launch(sizer.adapters),
        )
    )
    if kv_space is not None:
        serve = f"{CPU_KV_VARIABLE}={kv_space} {serve}"
    if on_cpu:
        kind = CPU_NODE
    elif nodes > 1:
        kind = SEVERAL_NODES
    else:
        kind = ONE_CARD if cards == 1 else ONE_NODE
    return Way(
        engine=engine,
        artifact=artifact.name,
        artifact_format=artifact.format,
        precision=precision_label(artifact, shape),
        gpu_class=pool.label,
        pool=pool.describe(),
        interconnect=pool.interconnect,
        over_pcie=over_pcie and width > 1,
        kind=kind,
        cards=cards,
        nodes=nodes,
        tensor_parallel=width,
        pipeline_parallel=pipeline,
        expert_parallel=expert,
        quantization=artifact.quantization.method if artifact.quantization else None,
        quantization_flag=flag,
        card_memory_gib=memory,
        per_card_gib=need.total_gib,
        weights_gib=need.weights_gib,
        context_gib=need.context_gib,
        engine_gib=need.engine_gib,
        usable_gib=usable,
        outside_gib=need.outside_gib,
        context_gib_per_1k_tokens=need.context_gib_per_1k_tokens,
        max_concurrency=need.max_concurrency,
        free_now=free_now,
        serve=serve,
        source=source,
        needs_download=gguf,
        rank_bits=precision_rank_bits(artifact, shape),
        cpu_kv_cache_gib=kv_space,
        kv_tokens=need.kv_tokens,
        adapters_gib=need.adapters_gib,
        adapters_host_gib=need.adapters_host_gib,
    )
