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

The ways on one pool are found by `pool_ways`; a `Way` and how it reads are
`way_record`'s (both re-exported here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmgw_core.engines.flags import ENGINE_NAMES
from llmgw_core.errors import BadInput
from llmgw_core.memory import Layout
from llmgw_core.memory.adapters import LoraSlots, takes_adapters
from llmgw_core.memory.need import ENGINE_DEFAULTS, EngineOptions
from llmgw_core.model.artifacts import GIB, Artifact
from llmgw_core.model.model_shape import ModelShape
from llmgw_core.model.source import ModelInfo
from llmgw_core.planner.fit import Miss, Sizer, advice_when_nothing_fits
from llmgw_core.planner.pool_ways import ways_on_pool
from llmgw_core.planner.pools import Fleet, Pool
from llmgw_core.planner.way_record import (
    CPU_NODE,
    GGUF_DIR,
    ONE_CARD,
    ONE_NODE,
    SEVERAL_NODES,
    Way,
    gguf_source,
)
from llmgw_core.planner.ways import (
    ENGINE_ORDER,
    context_refusal,
    engines_for,
    precision_label,
)

__all__ = [
    "CPU_NODE",
    "GGUF_DIR",
    "GIB",
    "ONE_CARD",
    "ONE_NODE",
    "SEVERAL_NODES",
    "ArtifactPlan",
    "Plan",
    "Way",
    "gguf_source",
    "plan",
]


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
    adapters: LoraSlots | None = None
    """The LoRA adapters served beside the model, as the plan sized their room."""

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
            "adapters": self.adapters.as_dict() if self.adapters else None,
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
    adapters: LoraSlots | None = None,
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
        adapters: LoRA adapters served beside the model and the engine's room for them.

    Returns:
        The plan; `plan.best` is None when nothing fits, and `plan.advice` then
        says what would change that.

    Raises:
        BadInput: the context is longer than the model was trained for.
    """
    pools = fleet.pools() if isinstance(fleet, Fleet) else tuple(fleet)
    sizer = Sizer(
        context,
        concurrency,
        gpu_memory_utilization,
        kv_cache_dtype,
        enforce_eager,
        engine_options,
        adapters,
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
            if not takes_adapters(engine, adapters):
                assert adapters is not None
                kind = "GGUF" if adapters.adapters[0].format == "gguf" else "PEFT (safetensors)"
                notes.append(
                    f"{artifact.name}: {ENGINE_NAMES.get(engine, engine)} does not serve "
                    f"{kind} adapters"
                )
                continue
            for pool in pools:
                found.extend(ways_on_pool(engine, artifact, shape, pool, ref, sizer, misses, notes))
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
        adapters=adapters,
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


def _cards_freed(options: list[Way]) -> list[str]:
    """When every way that fits uses busy cards: which cards, freed, would run it now."""
    if any(way.free_now for way in options):
        return []
    best = options[0]
    nodes = f"on {best.nodes} nodes" if best.nodes > 1 else "of one node"
    return [
        f"free {best.cards} {best.gpu_class} cards {nodes}: every way that fits uses busy cards now"
    ]
