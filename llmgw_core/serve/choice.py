"""Which ways a `serve` tries, in order: the plan's, narrowed or forced by the operator (pure).

Without a layout the plan's ways are tried best first (the first, then as
many fallbacks as asked). An operator may narrow them — `gpu_class`,
`engine`, `artifact` — or force a layout the plan would not choose, such as
a model that fits four cards of one node spread over two nodes of eight
(`gpus: 8, nodes: 2`) to bring a fabric up: that way is sized here with the
planner's own rules (`plan_fit.Sizer`), refused when the cards cannot hold
it or the width cannot split the heads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmgw_core.errors import BadInput, DoesNotFit
from llmgw_core.memory import DEFAULT_USABLE_FRACTION, Layout
from llmgw_core.model.artifacts import Artifact
from llmgw_core.model.shape import ModelShape
from llmgw_core.model.source import ModelInfo
from llmgw_core.placement import Want
from llmgw_core.planner.fit import Sizer
from llmgw_core.planner.plan import Plan, Way, gguf_source
from llmgw_core.planner.pools import Fleet
from llmgw_core.planner.ways import (
    dtype_flag,
    engines_for,
    load_refusal,
    quantization_flag,
    uses_expert_parallel,
    width_refusal,
)

LLAMA_CPP = "llama.cpp"


@dataclass(frozen=True)
class Overrides:
    """What the operator fixed of the layout (None: the plan decides)."""

    engine: str | None = None
    artifact: str | None = None
    gpu_class: str | None = None
    gpus: int | None = None
    nodes: int | None = None

    @property
    def forces_layout(self) -> bool:
        """True when the operator gave the cards of each node or the nodes."""
        return self.gpus is not None or self.nodes is not None


def way_layout(way: Mapping[str, Any]) -> dict[str, Any]:
    """The `serve` fields that pick a plan's way again, from its record (`Way.as_dict`):
    engine, artifact, and on cards the class, the cards of each node and the nodes — those
    the record gives. The console's wizard serves the way it listed with these, as a script
    would write them (`Overrides(**way_layout(way))` is the same pick in the core)."""
    gpu_class = way.get("gpu_class")
    fields = {
        "engine": way.get("engine"),
        "artifact": way.get("artifact"),
        "gpu_class": gpu_class,
        # A CPU node's way has no cards to count (its class is `cpu`).
        "gpus": way.get("cards_per_node") if gpu_class and not way.get("on_cpu") else None,
        "nodes": way.get("nodes"),
    }
    return {name: value for name, value in fields.items() if value is not None}


@dataclass(frozen=True)
class Choice:
    """One way to serve the model, concrete enough to place and launch.

    Attributes:
        engine: "vllm" | "sglang" | "llama.cpp".
        artifact: the artifact's name (`original`, `Q4_K_M`).
        artifact_format: "safetensors" | "gguf".
        source: what the engine loads: a repo id, or a path on the nodes.
        gpu_class: the device class, None on a CPU node.
        cards_per_node: devices on each node (0 on a CPU node).
        nodes: how many nodes.
        tensor_parallel, pipeline_parallel, expert_parallel: the layout.
        quantization, quantization_flag, min_compute_capability, dtype_flag: what loads it.
        gpu_memory_utilization: the engine's share of a card; None: its own default.
        per_card_gib: what a card (or the CPU node's RAM) needs.
        usable_share: the share of a device the engine may use.
        interconnect: the interconnect the plan sized it for.
        label: `4 × h100-80g`, for people.
        over_pcie: the tensor-parallel cards share no NVLink (PCIe cards), so
            placement does not ask for NVLink between them.
        cpu_kv_cache_gib: vLLM on a CPU node: the KV cache the plan sized, whole GiB.
        kv_tokens: the tokens of KV cache the engine will log, where the plan fixes its size.
    """

    engine: str
    artifact: str
    artifact_format: str
    source: str
    gpu_class: str | None
    cards_per_node: int
    nodes: int
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: bool
    quantization: str | None
    quantization_flag: str | None
    min_compute_capability: float | None
    dtype_flag: str | None
    gpu_memory_utilization: float | None
    per_card_gib: float
    usable_share: float
    interconnect: str | None
    label: str
    over_pcie: bool = False
    cpu_kv_cache_gib: int | None = None
    kv_tokens: int | None = None

    def want(self, models: tuple[str, ...] = ()) -> Want:
        """What placement must find for this way."""
        return Want(
            gpu_class=self.gpu_class,
            cards_per_node=self.cards_per_node,
            nodes=self.nodes,
            nvlink_inside=self.engine != LLAMA_CPP and not self.over_pcie,
            ram_gib=self.per_card_gib * self.tensor_parallel if self.gpu_class is None else 0.0,
            numa_nodes=self.tensor_parallel if self.gpu_class is None else 0,
            ram_share=self.usable_share,
            interconnect=self.interconnect,
            models=models,
        )

    def as_dict(self) -> dict[str, Any]:
        """The way as the steps' JSON gives it."""
        return {
            "engine": self.engine,
            "artifact": self.artifact,
            "format": self.artifact_format,
            "source": self.source,
            "gpu_class": self.gpu_class,
            "cards_per_node": self.cards_per_node,
            "nodes": self.nodes,
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "expert_parallel": self.expert_parallel,
            "over_pcie": self.over_pcie,
            "quantization_flag": self.quantization_flag,
            "per_card_gib": round(self.per_card_gib, 2),
            "label": self.label,
            "cpu_kv_cache_gib": self.cpu_kv_cache_gib,
            "kv_tokens": self.kv_tokens,
        }


def _artifact(model: ModelInfo, name: str) -> Artifact:
    for artifact in model.artifacts:
        if artifact.name == name:
            return artifact
    raise BadInput(f"{model.ref} has no file {name!r}")


def _min_cc(artifact: Artifact) -> float | None:
    quant = artifact.quantization
    return quant.min_compute_capability if quant is not None else None


def choice_of_way(way: Way, model: ModelInfo) -> Choice:
    """A plan's way, as a choice to place and launch."""
    artifact = _artifact(model, way.artifact)
    on_cpu = way.on_cpu
    per_node = 0 if on_cpu else way.cards_per_node
    share = way.usable_gib / way.card_memory_gib if way.card_memory_gib else DEFAULT_USABLE_FRACTION
    gguf = way.artifact_format == "gguf"
    return Choice(
        engine=way.engine,
        artifact=way.artifact,
        artifact_format=way.artifact_format,
        source=way.source,
        gpu_class=None if on_cpu else way.gpu_class,
        cards_per_node=per_node,
        nodes=way.nodes,
        tensor_parallel=way.tensor_parallel,
        pipeline_parallel=way.pipeline_parallel,
        expert_parallel=way.expert_parallel,
        quantization=way.quantization,
        quantization_flag=way.quantization_flag,
        min_compute_capability=_min_cc(artifact),
        dtype_flag=_dtype_of(way, artifact, model),
        gpu_memory_utilization=None if on_cpu or gguf else round(share, 2),
        per_card_gib=way.per_card_gib,
        usable_share=share,
        interconnect=way.interconnect,
        label=way.label(),
        over_pcie=way.over_pcie,
        cpu_kv_cache_gib=way.cpu_kv_cache_gib,
        kv_tokens=way.kv_tokens,
    )


def _dtype_of(way: Way, artifact: Artifact, model: ModelInfo) -> str | None:
    shape = artifact.shape or model.shape
    if shape is None or way.on_cpu:
        return None
    from llmgw_core.planner.gpu_classes import gpu_class

    try:
        card = gpu_class(way.gpu_class)
    except BadInput:
        return None
    return dtype_flag(way.engine, artifact, shape, card)


def _matches(way: Way, overrides: Overrides) -> bool:
    if overrides.engine and way.engine != overrides.engine:
        return False
    if overrides.artifact and overrides.artifact.lower() not in {
        way.artifact.lower(),
        way.precision.lower(),
    }:
        return False
    if overrides.gpu_class:
        wanted = overrides.gpu_class.lower()
        if wanted == "cpu" and not way.on_cpu:
            return False
        if wanted != "cpu" and way.gpu_class != wanted:
            return False
    if overrides.nodes is not None and way.nodes != overrides.nodes:
        return False
    return overrides.gpus is None or way.cards_per_node == overrides.gpus


def choices(
    plan: Plan,
    model: ModelInfo,
    fleet: Fleet,
    overrides: Overrides,
    *,
    fallbacks: int,
) -> tuple[Choice, ...]:
    """The ways `serve` tries, best first: one, and up to `fallbacks` more.

    Raises:
        DoesNotFit: nothing fits, or nothing matching what the operator fixed.
        BadInput: a forced layout that cannot work (a width the heads refuse,
            an engine that cannot load the file).
    """
    matching = [way for way in plan.options if _matches(way, overrides)]
    if not matching and overrides.forces_layout:
        return (_forced(plan, model, fleet, overrides),)
    if not matching:
        if not plan.options:
            raise DoesNotFit(plan.does_not_fit_sentence())
        fixed = ", ".join(
            f"{key} {value}"
            for key, value in (
                ("engine", overrides.engine),
                ("file", overrides.artifact),
                ("class", overrides.gpu_class),
            )
            if value
        )
        raise DoesNotFit(
            f"{plan.model} has no way that fits with {fixed}",
            f"the plan's best way is {plan.options[0].label()}; drop what you fixed or fix another",
        )
    seen: list[Choice] = []
    for way in matching:
        choice = choice_of_way(way, model)
        key = (
            choice.engine,
            choice.artifact,
            choice.gpu_class,
            choice.cards_per_node,
            choice.nodes,
        )
        if any((c.engine, c.artifact, c.gpu_class, c.cards_per_node, c.nodes) == key for c in seen):
            continue
        seen.append(choice)
        if len(seen) > fallbacks:
            break
    return tuple(seen)


def _forced_artifact(model: ModelInfo, overrides: Overrides) -> Artifact:
    for artifact in model.artifacts:
        named = overrides.artifact is None or overrides.artifact.lower() == artifact.name.lower()
        if named and (overrides.engine is None or overrides.engine in engines_for(artifact)):
            return artifact
    raise BadInput(
        f"{model.ref} has no file for {overrides.engine or 'any engine'}"
        + (f" named {overrides.artifact}" if overrides.artifact else ""),
        f"its files are {', '.join(a.name for a in model.artifacts)}",
    )


def _forced(plan: Plan, model: ModelInfo, fleet: Fleet, overrides: Overrides) -> Choice:
    """A layout the operator forced, sized with the planner's rules."""
    artifact = _forced_artifact(model, overrides)
    shape: ModelShape | None = artifact.shape or model.shape
    if shape is None:
        raise BadInput(f"{model.ref}: the model's shape is unknown, so no layout can be forced")
    engine = overrides.engine or engines_for(artifact)[0]
    if not overrides.gpu_class:
        raise BadInput(
            "a forced layout (`gpus`, `nodes`) needs `gpu_class`",
            "say which cards, e.g. gpu_class: h100-80g",
        )
    pool = next((p for p in fleet.pools() if p.label == overrides.gpu_class.lower()), None)
    if pool is None or pool.gpu_class is None:
        raise DoesNotFit(f"no ready node has {overrides.gpu_class} cards")
    card = pool.gpu_class
    refusal = load_refusal(engine, artifact, shape, card)
    if refusal:
        raise BadInput(f"{model.ref} on {card.label}: {refusal}")
    per_node = overrides.gpus or 1
    nodes = overrides.nodes or 1
    width = per_node if engine != LLAMA_CPP else 1
    stages = nodes if engine != LLAMA_CPP else per_node
    if engine != LLAMA_CPP:
        refused = width_refusal(shape, width, artifact.quantization)
        if refused:
            raise BadInput(f"{model.ref} cannot be split {width} wide: {refused}")
    if engine == LLAMA_CPP and nodes > 1:
        raise BadInput("llama.cpp serves a replica from one node here", "drop `nodes`")
    expert = uses_expert_parallel(engine, shape, width)
    layout = Layout(width, stages, expert)
    sizer = Sizer(
        plan.context,
        plan.concurrency,
        plan.gpu_memory_utilization,
        plan.kv_cache_dtype,
        plan.enforce_eager,
        plan.engine_options,
        plan.adapters,
    )
    need = sizer.need(engine, artifact, shape, layout, card.memory_gib)
    usable = sizer.usable(engine, card.memory_gib)
    if need.total_gib > usable:
        raise DoesNotFit(
            f"{model.ref} on {nodes} × {per_node} {card.label} needs {need.total_gib:.1f} GB a card "
            f"of {usable:.0f} usable",
            "give more cards or nodes, or a shorter context",
        )
    gguf = artifact.format == "gguf"
    ref = model.repo_id or model.ref
    source = gguf_source(ref, artifact.files[0]) if gguf and artifact.files else ref
    label = (
        f"{nodes} nodes × {per_node} × {card.label}" if nodes > 1 else f"{per_node} × {card.label}"
    )
    return Choice(
        engine=engine,
        artifact=artifact.name,
        artifact_format=artifact.format,
        source=source,
        gpu_class=card.label,
        cards_per_node=per_node,
        nodes=nodes,
        tensor_parallel=width,
        pipeline_parallel=stages,
        expert_parallel=expert,
        quantization=artifact.quantization.method if artifact.quantization else None,
        quantization_flag=quantization_flag(artifact, engine),
        min_compute_capability=_min_cc(artifact),
        dtype_flag=dtype_flag(engine, artifact, shape, card),
        gpu_memory_utilization=None if gguf else round(usable / card.memory_gib, 2),
        per_card_gib=need.total_gib,
        usable_share=usable / card.memory_gib,
        interconnect=None,
        label=label,
        over_pcie=width > 1 and max(pool.nvlink_widths(free_only=False), default=1) == 1,
    )
