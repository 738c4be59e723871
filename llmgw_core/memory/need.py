"""What a card needs and how a replica is split over cards: the values every engine's rule returns.

The engines' rules (`vllm`, `sglang`, `llamacpp`) and the package's entry
(`memory.card_need`) all use these; this module imports neither, so the rules
import it one way only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmgw_core.memory.adapters import LoraSlots
    from llmgw_core.model.artifacts import Artifact
    from llmgw_core.model.shape import ModelShape

DEFAULT_USABLE_FRACTION = 0.90


@dataclass(frozen=True)
class Layout:
    """How a replica is split over cards."""

    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    expert_parallel: bool = False

    @property
    def cards(self) -> int:
        """Cards the replica uses."""
        return self.tensor_parallel * self.pipeline_parallel


@dataclass(frozen=True)
class CardNeed:
    """What one card (the worst card of the layout) needs, in GiB.

    Attributes:
        weights_gib: the card's share of the weights as the engine loads them.
        context_gib: the KV cache for `context` tokens × `concurrency` sequences.
        engine_gib: what the engine takes inside its usable budget besides weights
            and KV (vLLM: activation peak + non-torch memory, and CUDA graphs
            where the version counts them in the budget).
        context_gib_per_1k_tokens: what 1000 more tokens of one sequence cost on this card.
        max_concurrency: how many sequences of `context` the usable memory holds
            (None when not even the weights fit).
        usable_gib: the card's usable memory this need is measured against.
        outside_gib: what the engine takes beyond its usable budget (vLLM: the
            CUDA context and NCCL set-up before profiling, and CUDA graphs
            captured after the KV cache); it must fit in the rest of the card.
        card_memory_gib: the whole card (None where no such limit applies).
        kv_tokens: the tokens of KV cache the engine will log it holds, where the plan
            fixes the cache's size (vLLM on a CPU node); None elsewhere.
        adapters_gib: what the engine keeps on the card for LoRA adapters (`memory.adapters`).
        adapters_host_gib: what it keeps of them in host RAM besides (vLLM's `max_cpu_loras`).
    """

    weights_gib: float
    context_gib: float
    engine_gib: float
    context_gib_per_1k_tokens: float
    max_concurrency: float | None
    usable_gib: float = 0.0
    outside_gib: float = 0.0
    card_memory_gib: float | None = None
    kv_tokens: int | None = None
    adapters_gib: float = 0.0
    adapters_host_gib: float = 0.0

    @property
    def total_gib(self) -> float:
        """Weights + context + engine + adapters: what is measured against the usable memory."""
        return self.weights_gib + self.context_gib + self.engine_gib + self.adapters_gib

    @property
    def fits(self) -> bool:
        """True when the total is within the usable memory and the rest fits beside it."""
        if self.total_gib > self.usable_gib + 1e-9:
            return False
        if self.card_memory_gib is None:
            return True
        return self.usable_gib + self.outside_gib <= self.card_memory_gib + 1e-9


@dataclass(frozen=True)
class EngineOptions:
    """Engine flags that change what a card holds, beyond the KV type, the share and eager mode.

    Attributes:
        flash_attn: llama.cpp's flash attention on (the launch passes it
            explicitly either way): without it the compute buffer holds every
            head's scores against the whole context.
        n_ubatch: llama.cpp's tokens of one micro-batch (`--ubatch-size`),
            which every compute-buffer term is a multiple of.
        n_outputs: llama.cpp's logits reserved a micro-batch: None for every
            token of it (llama-cpp-python, older llama-server builds), else one
            a slot (llama-server builds that set `n_outputs_max`).
        max_num_batched_tokens: vLLM's tokens of one step, which its
            activation peak is profiled with; None for its default on the card.
    """

    flash_attn: bool = True
    n_ubatch: int = 512
    n_outputs: int | None = None
    max_num_batched_tokens: int | None = None


ENGINE_DEFAULTS = EngineOptions()
"""How the launch starts an engine unless the operator's engine_args say otherwise."""


@dataclass(frozen=True)
class NeedQuery:
    """One question to an engine's rule: this artifact, split so, this much context, on this card.

    Attributes:
        artifact: the weights served (their real bytes).
        shape: the model's shape (for a GGUF artifact, its header's shape when read).
        layout: tensor / pipeline parallel widths (llama.cpp: devices of a layer split).
        context: tokens of context per sequence.
        concurrency: sequences of `context` served at once.
        usable_gib: what the engine may use of the card (`usable_gib`).
        card_memory_gib: the card's memory as CUDA reports it (a CPU node: its RAM).
        gpu_memory_utilization: the operator's usable fraction, None for the engine's default.
        kv_cache_dtype: "auto" / None (the model's dtype), "fp8", "f16", "q8_0" ...
        engine_version: the engine's version; None = the newest rules known.
        cpu_only: a CPU node: llama.cpp (everything in RAM, no CUDA context) or
            vLLM's CPU backend (a rank per NUMA node).
    """

    artifact: Artifact
    shape: ModelShape
    layout: Layout
    context: int
    concurrency: int
    usable_gib: float
    card_memory_gib: float
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str | None = None
    enforce_eager: bool = False
    """vLLM's `--enforce-eager`: no CUDA graphs captured (their memory is not needed)."""
    engine_version: str | None = None
    cpu_only: bool = False
    engine_options: EngineOptions = ENGINE_DEFAULTS
    repack_types: frozenset[str] = frozenset()
    """llama.cpp on a CPU node: the tensor types its CPU copies into a repacked buffer."""
    adapters: LoraSlots | None = None
    """The LoRA adapters served beside the model, and the engine's room for them."""
