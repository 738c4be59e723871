"""One way an artifact runs, as the planner offers it: the `Way` record and how it reads (pure).

Its kind (one card, one node, several nodes, a CPU node), the cards and
layout, what each card holds, the command that serves it, and the words and
JSON the console and the `plan` step show it in (`label`, `layout_text`,
`memory_text`, `as_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmgw_core.planner.ways import LLAMA_CPP

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
    cpu_kv_cache_gib: int | None = None
    """vLLM on a CPU node: the KV cache the launch asks for (`VLLM_CPU_KVCACHE_SPACE`), GiB."""
    kv_tokens: int | None = None
    """The tokens of KV cache the engine will log, where the plan fixes its size."""
    adapters_gib: float = 0.0
    """What the engine keeps on each card for LoRA adapters (in `per_card_gib`)."""
    adapters_host_gib: float = 0.0
    """What it keeps of them in host RAM besides (vLLM's `max_cpu_loras`)."""

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
        if self.on_cpu:
            ranks = self.tensor_parallel
            return f"{engine} in RAM, {ranks} NUMA node{'s' if ranks > 1 else ''}"
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
        if self.on_cpu and self.engine != LLAMA_CPP:
            where = "of a NUMA node's RAM"
        text = (
            f"{self.per_card_gib:.1f} GB {where} (weights {self.weights_gib:.1f} + context "
            f"{self.context_gib:.1f} + engine {self.engine_gib:.1f}"
            + (f" + adapters {self.adapters_gib:.2f}" if self.adapters_gib else "")
            + f") of {self.usable_gib:.0f} usable"
        )
        if self.outside_gib >= 0.05:
            text += f" (+{self.outside_gib:.1f} beside it: CUDA context and graphs)"
        if self.cards > 1:
            text += f"; {self.total_gib:.0f} GB on {self.cards} cards"
        if self.cpu_kv_cache_gib is not None and self.kv_tokens is not None:
            text += f"; a KV cache of {self.cpu_kv_cache_gib} GB holds {self.kv_tokens:,} tokens"
        return text

    def parts_text(self, joiner: str = " + ") -> str:
        """What a card holds, part by part: `32.9 + 2.5 + 2.0`, `+ 0.62` more for adapters."""
        parts = [self.weights_gib, self.context_gib, self.engine_gib]
        text = joiner.join(f"{part:.1f}" for part in parts)
        return text + (f"{joiner}{self.adapters_gib:.2f}" if self.adapters_gib else "")

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
            "parts": self.parts_text(),
            "source": self.source,
            "needs_download": self.needs_download,
            "serve": self.serve,
            "cpu_kv_cache_gib": self.cpu_kv_cache_gib,
            "kv_tokens": self.kv_tokens,
            "adapters_gib": round(self.adapters_gib, 6),
            "adapters_host_gib": round(self.adapters_host_gib, 6),
        }
