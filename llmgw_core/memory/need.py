"""What a card needs and how a replica is split over cards: the values every engine's rule returns.

The engines' rules (`vllm`, `sglang`, `llamacpp`) and the package's entry
(`memory.card_need`) all use these; this module imports neither, so the rules
import it one way only.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """

    weights_gib: float
    context_gib: float
    engine_gib: float
    context_gib_per_1k_tokens: float
    max_concurrency: float | None
    usable_gib: float = 0.0
    outside_gib: float = 0.0
    card_memory_gib: float | None = None

    @property
    def total_gib(self) -> float:
        """Weights + context + engine: what is measured against the usable memory."""
        return self.weights_gib + self.context_gib + self.engine_gib

    @property
    def fits(self) -> bool:
        """True when the total is within the usable memory and the rest fits beside it."""
        if self.total_gib > self.usable_gib + 1e-9:
            return False
        if self.card_memory_gib is None:
            return True
        return self.usable_gib + self.outside_gib <= self.card_memory_gib + 1e-9
