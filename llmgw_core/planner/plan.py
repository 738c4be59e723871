"""Does a model fit, and how: every artifact × every way × every pool, ranked (pure).

The ways, tried in this order for each artifact and pool:

1. one card;
2. several cards of one node, tensor parallel over NVLink;
3. several nodes of one pool (one fabric, or one NVLink domain — never two),
   pipeline parallel between them and tensor parallel inside each, any
   number of nodes;
4. a CPU node, for a GGUF file on llama.cpp, sized in its RAM.

A GGUF file on GPUs runs on llama.cpp, split by layer over the cards of one
node (no NVLink needed). Options are ranked by the kind of way, then fewest
cards, then fewest nodes, then the better precision up to 8 bits (a bf16
checkpoint is no better than an 8-bit one for this), then free cards now.

What a card needs is asked of `llmgw_core.memory.card_need`, against the
usable memory `llmgw_core.memory.usable_gib` gives: one rule each, here only
compared. When nothing fits, the plan says what would change that.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llmgw_core.engines.planned import planned_argv
from llmgw_core.errors import BadInput
from llmgw_core.memory import Layout
from llmgw_core.memory.need import ENGINE_DEFAULTS, EngineOptions
from llmgw_core.model.artifacts import GIB, Artifact
from llmgw_core.model.shape import ModelShape
from llmgw_core.model.source import ModelInfo
from llmgw_core.planner.fit import (
    Miss,
    Sizer,
    advice_when_nothing_fits,
    cpu_repack,
    smallest_fitting,
)
from llmgw_core.planner.gpu_classes import GpuClass
from llmgw_core.planner.pools import Fleet, Pool
from llmgw_core.planner.ways import (
    ENGINE_ORDER,
    LLAMA_CPP,
    context_refusal,
    dtype_flag,
    engines_for,
    load_refusal,
    precision_label,
    precision_rank_bits,
    quantization_flag,
    tensor_widths,
    uses_expert_parallel,
)

# Way kinds, in the order they are tried.
ONE_CARD, ONE_NODE, SEVERAL_NODES, CPU_NODE = 0, 1, 2, 3

# Where a GGUF file is expected on a node until the fleet says where its model dirs are.
GGUF_DIR = "models"


def gguf_source(ref: str, file: str) -> str:
    """Where the planned command finds a GGUF file: a local model's own path, else the file
    under the Hub repository's folder in the nodes' model directory."""
    if ref.startswith("/"):
        return f"{ref.rstrip('/')}/{file}"
    return f"{GGUF_DIR}/{ref}/{file}"


@dataclass(frozen=True)
class Way:
    """One way an artifact fits: the engine, the cards, the layout, what each card holds.

    Memory figures are GiB (printed as GB, as the engines print them).
    """

    engine: str
    artifact: str
    artifact_format: str
    precision: str
    gpu_class: str
    pool: str
    interconnect: str | None
    over_pcie: bool
    kind: int
    cards: int
    nodes: int
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: bool
    quantization: str | None
    quantization_flag: str | None
    card_memory_gib: float
    per_card_gib: float
    weights_gib: float
    context_gib: float
    engine_gib: float
    usable_gib: float
    outside_gib: float
    context_gib_per_1k_tokens: float
    max_concurrency: float | None
    free_now: bool
    serve: str
    source: str
    needs_download: bool
    rank_bits: float = field(repr=False, default=16.0)

    @property
    def total_gib(self) -> float:
        """What all the way's cards hold together (the per-card need times the cards)."""
        return self.per_card_gib * max(self.cards, 1)

    @property
    def cards_per_node(self) -> int:
        """The cards the way takes on each of its nodes (`cards` counts them all)."""
        return self.cards // max(self.nodes, 1)

    @property
    def on_cpu(self) -> bool:
        """True for a CPU node."""
        return self.kind == CPU_NODE

    def label(self) -> str:
        """`4 × h100-80g`, `2 nodes × 8 × h100-80g on ib-a`, `CPU node`."""
        if self.on_cpu:
            return "CPU node"
        if self.nodes > 1:
            return (
                f"{self.nodes} nodes × {self.cards_per_node} × {self.gpu_class} "
                f"on {self.interconnect}"
            )
        return f"{self.cards} × {self.gpu_class}"

    def layout_text(self) -> str:
        """`vLLM TP4`, `vLLM PP2 × TP8, experts spread`, `llama.cpp, 2 cards by layer`."""
        engine = {"vllm": "vLLM", "sglang": "SGLang"}.get(self.engine, self.engine)
        if self.engine == LLAMA_CPP:
            if self.on_cpu:
                return f"{engine} in RAM"
            if self.pipeline_parallel > 1:
                return f"{engine}, {self.pipeline_parallel} cards by layer"
            return engine
        text = f"{engine} TP{self.tensor_parallel}"
        if self.pipeline_parallel > 1:
            text = f"{engine} PP{self.pipeline_parallel} × TP{self.tensor_parallel}"
        if self.over_pcie:
            text += " over PCIe"
        if self.expert_parallel:
            text += ", experts spread"
        return text

    def memory_text(self) -> str:
        """`37.4 GB a card (weights 32.9 + context 2.5 + engine 2.0) of 71 usable; 150 GB on 4 cards`."""
        where = "of RAM" if self.on_cpu else "a card"
        text = (
            f"{self.per_card_gib:.1f} GB {where} (weights {self.weights_gib:.1f} + context "
            f"{self.context_gib:.1f} + engine {self.engine_gib:.1f}) of {self.usable_gib:.0f} usable"
        )
        if self.outside_gib >= 0.05:
            text += f" (+{self.outside_gib:.1f} beside it: CUDA context and graphs)"
        if self.cards > 1:
            text += f"; {self.total_gib:.0f} GB on {self.cards} cards"
        return text

    def as_dict(self) -> dict[str, Any]:
        """The way as the `plan` step's JSON gives it."""
        return {
            "engine": self.engine,
            "artifact": self.artifact,
            "format": self.artifact_format,
            "precision": self.precision,
            "gpu_class": self.gpu_class,
            "pool": self.pool,
            "interconnect": self.interconnect,
            "over_pcie": self.over_pcie,
            "cards": self.cards,
            "cards_per_node": self.cards_per_node,
            "nodes": self.nodes,
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "expert_parallel": self.expert_parallel,
            "quantization": self.quantization,
            "quantization_flag": self.quantization_flag,
            "card_memory_gib": round(self.card_memory_gib, 2),
            "per_card_gib": round(self.per_card_gib, 2),
            "weights_gib": round(self.weights_gib, 2),
            "context_gib": round(self.context_gib, 2),
            "engine_gib": round(self.engine_gib, 2),
            "usable_gib": round(self.usable_gib, 2),
            "outside_gib": round(self.outside_gib, 2),
            "total_gib": round(self.total_gib, 2),
            "context_gib_per_1k_tokens": round(self.context_gib_per_1k_tokens, 4),
            "max_concurrency": None
            if self.max_concurrency is None
            else round(self.max_concurrency, 2),
            "free_now": self.free_now,
            "on_cpu": self.on_cpu,
            "label": self.label(),
            "layout": self.layout_text(),
            "memory": self.memory_text(),
            "source": self.source,
            "needs_download": self.needs_download,
            "serve": self.serve,
        }


@dataclass(frozen=True)
class ArtifactPlan:
    """One artifact's row: its size and the best way it runs (None when it fits nowhere)."""

    name: str
    format: str
    size_gib: float
    files: tuple[str, ...]
    precision: str
    best: Way | None

    def as_dict(self) -> dict[str, Any]:
        """The row as the `plan` step's JSON gives it."""
        return {
            "name": self.name,
            "format": self.format,
            "size_gib": round(self.size_gib, 2),
            "files": list(self.files),
            "precision": self.precision,
            "best": self.best.as_dict() if self.best else None,
        }


@dataclass(frozen=True)
class Plan:
    """Every way every artifact fits, best first, and what would make it fit when none does."""

    model: str
    context: int
    concurrency: int
    artifacts: tuple[ArtifactPlan, ...]
    options: tuple[Way, ...]
    context_gib_per_1k_tokens: float | None
    advice: tuple[str, ...]
    notes: tuple[str, ...]
    kv_cache_dtype: str | None = None
    """The KV cache's format the plan sized with (None: the model's own dtype)."""
    gpu_memory_utilization: float | None = None
    """The engine's share of a card the plan sized with (None: each engine's default)."""
    enforce_eager: bool = False
    """vLLM without CUDA graphs, as the plan sized it."""
    engine_options: EngineOptions = ENGINE_DEFAULTS
    """The engine flags that size memory (llama.cpp's flash attention and micro-batch, vLLM's
    batched tokens), as the plan sized them."""

    @property
    def best(self) -> Way | None:
        """The first option, or None when nothing fits."""
        return self.options[0] if self.options else None

    def does_not_fit_sentence(self) -> str:
        """One sentence for when nothing fits, naming what would change that."""
        head = f"{self.model} at a context of {self.context} tokens fits nowhere in this fleet"
        if not self.advice:
            return head
        return f"{head}; what would make it fit: " + "; or ".join(self.advice)

    def as_dict(self) -> dict[str, Any]:
        """The plan as the `plan` step's JSON result."""
        return {
            "model": self.model,
            "context": self.context,
            "concurrency": self.concurrency,
            "artifacts": [a.as_dict() for a in self.artifacts],
            "best": self.best.as_dict() if self.best else None,
            "options": [w.as_dict() for w in self.options],
            "context_gib_per_1k_tokens": None
            if self.context_gib_per_1k_tokens is None
            else round(self.context_gib_per_1k_tokens, 4),
            "advice": list(self.advice),
            "notes": list(self.notes),
        }


def _artifacts_for(model: ModelInfo, format: str | None, precision: str | None) -> list[Artifact]:
    chosen = [a for a in model.artifacts if format in (None, "both", a.format)]
    if precision:
        wanted = precision.strip().lower()
        chosen = [
            a
            for a in chosen
            if wanted in {a.name.lower(), precision_label(a, a.shape or model.shape).lower()}
        ]
    return chosen


def plan(
    model: ModelInfo,
    fleet: Fleet | Sequence[Pool],
    *,
    format: str | None = None,
    context: int,
    concurrency: int = 1,
    precision: str | None = None,
    gpu_memory_utilization: float | None = None,
    kv_cache_dtype: str | None = None,
    enforce_eager: bool = False,
    engine_options: EngineOptions = ENGINE_DEFAULTS,
) -> Plan:
    """Plan every artifact of `model` against the pools of `fleet`.

    Args:
        model: the model, its shape and artifacts (from `load_model`).
        fleet: a fleet, or its pools.
        format: "gguf", "safetensors", or None / "both" for every artifact.
        context: tokens of context each sequence may hold.
        concurrency: sequences of `context` held at once.
        precision: only artifacts of this precision (`bf16`, `fp8`, `Q4_K_M` …).
        gpu_memory_utilization: the engine's share of a card, when not the default.
        kv_cache_dtype: the KV cache's format (`fp8` halves it), when not the model's dtype.
        enforce_eager: vLLM without CUDA graphs (their memory is not needed).
        engine_options: the engine flags that size memory beyond those above (llama.cpp's
            flash attention and micro-batch, vLLM's batched tokens), as launched.

    Returns:
        The plan; `plan.best` is None when nothing fits, and `plan.advice` then
        says what would change that.

    Raises:
        BadInput: the context is longer than the model was trained for.
    """
    pools = fleet.pools() if isinstance(fleet, Fleet) else tuple(fleet)
    sizer = Sizer(
        context, concurrency, gpu_memory_utilization, kv_cache_dtype, enforce_eager, engine_options
    )
    ref = model.repo_id or model.ref
    notes: list[str] = []
    options: list[Way] = []
    misses: list[Miss] = []
    rows: list[ArtifactPlan] = []
    for artifact in _artifacts_for(model, format, precision):
        shape = artifact.shape or model.shape
        if shape is None:
            notes.append(
                f"{artifact.name}: its shape is unknown (no config.json, no GGUF header read)"
            )
            rows.append(_row(artifact, None, None))
            continue
        too_long = context_refusal(shape, context)
        if too_long is not None:
            raise BadInput(f"{ref}: {too_long}", f"plan a context of at most {shape.max_context}")
        found: list[Way] = []
        for engine in engines_for(artifact):
            for pool in pools:
                found.extend(
                    _ways_on_pool(engine, artifact, shape, pool, ref, sizer, misses, notes)
                )
        found = _one_node_ways_once(sorted(found, key=_rank))
        options.extend(found)
        rows.append(_row(artifact, shape, found[0] if found else None))
    if rows and not any(a.shape or model.shape for a in model.artifacts):
        raise BadInput(
            f"{ref}: the model's shape is unknown (no config.json, no GGUF header read)",
            "give a repository or directory with a config.json, or a GGUF file whose header can be read",
        )
    options.sort(key=_rank)
    whole = _whole_model_context_cost(model, sizer)
    advice = _cards_freed(options) if options else advice_when_nothing_fits(misses, sizer, context)
    return Plan(
        model=ref,
        context=context,
        concurrency=concurrency,
        artifacts=tuple(rows),
        options=tuple(options),
        context_gib_per_1k_tokens=whole,
        advice=tuple(advice),
        notes=tuple(dict.fromkeys(notes)),
        kv_cache_dtype=kv_cache_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        enforce_eager=enforce_eager,
        engine_options=engine_options,
    )


def _row(artifact: Artifact, shape: ModelShape | None, best: Way | None) -> ArtifactPlan:
    return ArtifactPlan(
        name=artifact.name,
        format=artifact.format,
        size_gib=artifact.size_bytes / GIB,
        files=artifact.files,
        precision=precision_label(artifact, shape),
        best=best,
    )


def _one_node_ways_once(ranked: list[Way]) -> list[Way]:
    """Drop a one-node way that another pool of the same class already offers.

    Pools of one class differ by fabric and NVLink domain, which only matter
    to a replica across nodes: inside one node, two such pools offer the same
    way, and the better-ranked one (free now first) is kept.
    """
    seen: set[tuple[Any, ...]] = set()
    kept: list[Way] = []
    for way in ranked:
        if way.nodes == 1 and not way.on_cpu:
            key = (
                way.engine,
                way.artifact,
                way.gpu_class,
                way.cards,
                way.tensor_parallel,
                way.pipeline_parallel,
                way.expert_parallel,
            )
            if key in seen:
                continue
            seen.add(key)
        kept.append(way)
    return kept


def _rank(way: Way) -> tuple[Any, ...]:
    return (
        way.kind,
        way.cards,
        way.nodes,
        -way.rank_bits,
        not way.free_now,
        ENGINE_ORDER.get(way.engine, 9),
        way.per_card_gib / way.usable_gib if way.usable_gib else 1.0,
        way.pool,
        way.artifact,
    )


def _whole_model_context_cost(model: ModelInfo, sizer: Sizer) -> float | None:
    """Context cost per 1000 tokens of the whole model (one card holding every layer)."""
    for artifact in model.artifacts:
        shape = artifact.shape or model.shape
        if shape is not None:
            engine = engines_for(artifact)[0]
            return sizer.need(engine, artifact, shape, Layout(), 1024.0).context_gib_per_1k_tokens
    return None


def _ways_on_pool(
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
    memory = pool.device_memory_gib
    expert = uses_expert_parallel(engine, shape, width)
    pipeline = layer_split if engine == LLAMA_CPP else nodes
    layout = Layout(width, pipeline, expert)
    need = sizer.need(engine, artifact, shape, layout, memory, cpu_repack=cpu_repack(pool))
    usable = sizer.usable(engine, memory)
    on_cpu = card is None
    cards = 0 if on_cpu else width * pipeline
    gguf = artifact.format == "gguf"
    source = gguf_source(ref, artifact.files[0]) if gguf and artifact.files else ref
    flag = quantization_flag(artifact, engine)
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
        )
    )
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
    )


def _cards_freed(options: list[Way]) -> list[str]:
    """When every way that fits uses busy cards: which cards, freed, would run it now."""
    if any(way.free_now for way in options):
        return []
    best = options[0]
    nodes = f"on {best.nodes} nodes" if best.nodes > 1 else "of one node"
    return [
        f"free {best.cards} {best.gpu_class} cards {nodes}: every way that fits uses busy cards now"
    ]
