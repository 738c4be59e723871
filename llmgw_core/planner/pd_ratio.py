"""Does splitting prefill from decode pay on these cards, and at which ratio (pure).

The question an operator asks before a disaggregated service, answered with
the arithmetic shown, each figure from one place:

* **prefill**: a prompt of L tokens costs 2·A·L FLOPs in its matrices (A: the
  parameters a token meets, a mixture of experts counting only the experts it
  is routed to) plus its attention, 2·d·L² on a full layer (less on a
  sliding-window one); a prefill replica of W cards does that at the cards'
  rated dense BF16 throughput (`planner.card_rates`) times `PREFILL_MFU`;
* **the transfer**: the KV bytes one prompt leaves behind, by the memory
  plan's own block rules (`memory.kv_vllm.kv_bytes_for`), over the rails'
  measured speed (`placement_pd`), or NVLink's rated one inside a node or a
  domain;
* **decode**: each step reads every weight and every sequence's KV once, so
  a step of B sequences takes (weights + B·KV) ÷ (HBM bandwidth ×
  `DECODE_BANDWIDTH_SHARE`); B is the most sequences the plan's KV room
  holds, the engine's default `max_num_seqs`, and the inter-token target allow;
* **the ratio**: a decode replica finishes B ÷ step ÷ output requests a
  second, a prefill replica `PREFILL_BUSY` ÷ prefill-time; prefill replicas per
  decode replica is their quotient, as the nearest small fraction;
* **whether it pays**: a replica doing both runs a prefill chunk (the engine's
  `max_num_batched_tokens`, at most the prompt) inside decode steps, and the
  inter-token latency of that step is the tail a split removes. Splitting
  pays when that tail breaks the target (or, with no target, at least
  doubles a decode step) while the split itself keeps it, and when moving
  the KV costs less than the prefill that made it.

The figures are estimates from rated numbers, not measurements; the advice
says so, and a benchmark of the running service is the proof.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from pydantic import Field

from llmgw_core.arguments import StrictArgs
from llmgw_core.memory.kv_vllm import kv_bytes_for
from llmgw_core.memory.vllm import default_batching
from llmgw_core.model.model_shape import CHUNKED, SLIDING, ModelShape
from llmgw_core.model.params import count_parameters
from llmgw_core.planner.card_rates import card_rate

PREFILL_MFU = 0.45
"""The share of rated BF16 throughput a long prefill reaches (vLLM and SGLang reach 40–60 %
on Hopper for prompts of thousands of tokens)."""
DECODE_BANDWIDTH_SHARE = 0.7
"""The share of rated HBM bandwidth a decode step reaches."""
PREFILL_BUSY = 0.8
"""A prefill replica is sized to be busy this share of the time, so a prompt seldom waits."""
MAX_RATIO_TERM = 8
"""The ratio is given as the nearest fraction with terms up to this."""
GB = 1e9


class Workload(StrictArgs):
    """What a service expects (`disaggregation.workload`): prompt and answer lengths, and the
    latencies it must keep."""

    input_tokens: int = Field(ge=1, le=16_777_216)
    output_tokens: int = Field(ge=1, le=16_777_216)
    ttft_s: float | None = Field(default=None, gt=0, le=3600, allow_inf_nan=False)
    """The time to first token to keep (a lone request), None: no target."""
    itl_s: float | None = Field(default=None, gt=0, le=60, allow_inf_nan=False)
    """The inter-token latency to keep, None: no target."""


@dataclass(frozen=True)
class Advice:
    """The advisor's answer.

    Attributes:
        pays: splitting is worth it on these cards for this workload.
        prefill_replicas, decode_replicas: the ratio (for a split that pays; else what it
            would be).
        verdict: one sentence: pays or not, and why.
        arithmetic: each step of the sum, one line each.
        figures: the numbers behind it, for `--json`.
    """

    pays: bool
    prefill_replicas: int
    decode_replicas: int
    verdict: str
    arithmetic: tuple[str, ...]
    figures: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The advice as the steps' JSON gives it."""
        return {
            "pays": self.pays,
            "ratio": f"{self.prefill_replicas}:{self.decode_replicas}",
            "prefill_replicas": self.prefill_replicas,
            "decode_replicas": self.decode_replicas,
            "verdict": self.verdict,
            "arithmetic": list(self.arithmetic),
            "figures": {k: round(v, 6) for k, v in self.figures.items()},
        }


def active_params(shape: ModelShape) -> int:
    """Matrix parameters one token meets: every layer's attention and dense parts, its
    shared experts, and of the routed experts only the share it is routed to."""
    count = count_parameters(shape)
    share = (
        (shape.experts_per_token or 1) / shape.num_experts
        if shape.is_moe and shape.num_experts
        else 1.0
    )
    return int(
        sum(
            layer.attention + layer.dense_mlp + layer.shared_experts + layer.routed_experts * share
            for layer in count.layers
        )
    )


def _attention_width(shape: ModelShape) -> int:
    if shape.mla:
        return shape.num_attention_heads * (shape.mla.qk_nope_head_dim + shape.mla.qk_rope_head_dim)
    return shape.num_attention_heads * shape.head_dim


def prompt_flops(shape: ModelShape, tokens: int) -> float:
    """FLOPs of a prefill of `tokens`: 2·A·L in the matrices, plus each layer's causal
    attention (QKᵀ and AV: 2·d·L² on a full layer, 4·d·L·W less the window's corner on a
    layer that looks back W tokens)."""
    width = _attention_width(shape)
    attention = 0.0
    for kind in shape.layer_attention or ("full",) * shape.num_layers:
        reach = tokens
        if kind == SLIDING and shape.sliding_window:
            reach = min(tokens, shape.sliding_window)
        elif kind == CHUNKED and shape.attention_chunk_size:
            reach = min(tokens, shape.attention_chunk_size)
        if reach >= tokens:
            attention += 2.0 * width * tokens * tokens
        else:
            attention += 4.0 * width * (tokens * reach - reach * reach / 2)
    return 2.0 * active_params(shape) * tokens + attention


def _kv_bytes(shape: ModelShape, tokens: int, width: int, kv_cache_dtype: str | None) -> int:
    """The KV one sequence of `tokens` holds on one card of a `width`-card replica."""
    return kv_bytes_for(
        shape,
        range(shape.num_layers),
        tokens=tokens,
        sequences=1,
        tensor_parallel=width,
        max_num_batched_tokens=tokens,
        kv_cache_dtype=kv_cache_dtype,
        serve_dtype=shape.dtype,
    )


def _ratio(prefill_per_decode: float) -> tuple[int, int]:
    """Prefill:decode replicas as the nearest fraction with small terms, each at least 1."""
    if prefill_per_decode <= 0 or math.isinf(prefill_per_decode):
        return (1, 1)
    best = (1, 1)
    error = math.inf
    for decode in range(1, MAX_RATIO_TERM + 1):
        prefill = max(1, min(MAX_RATIO_TERM, round(prefill_per_decode * decode)))
        miss = abs(math.log(prefill / decode / prefill_per_decode))
        if miss < error - 1e-9:
            best, error = (prefill, decode), miss
    fraction = Fraction(best[0], best[1])
    return fraction.numerator, fraction.denominator


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def advise(
    shape: ModelShape,
    workload: Workload,
    *,
    gpu_class: str,
    card_memory_gib: float,
    prefill_width: int,
    decode_width: int,
    weights_bytes_per_card: float,
    kv_room_bytes_per_card: float,
    transfer_gbps: float,
    transfer_label: str,
    kv_cache_dtype: str | None = None,
) -> Advice | None:
    """Whether a split pays for `workload` on `gpu_class` cards, and which ratio.

    Args:
        shape: the model's shape.
        workload: its prompt and answer lengths and latency targets.
        gpu_class: the cards both sides run on (None advice for one `card_rates` lacks).
        card_memory_gib: one card's memory (the engine's default batch follows it).
        prefill_width, decode_width: cards of each side's replica.
        weights_bytes_per_card: a decode card's share of the weights (the plan's).
        kv_room_bytes_per_card: what a decode card has left for KV (the plan's).
        transfer_gbps: the speed between the sides, Gb/s (the rails' measured total, or
            NVLink's rated).
        transfer_label: how that path is named (`8 rails of ib-a, measured`).
        kv_cache_dtype: the KV cache's format (`fp8`), None for the model's dtype.
    """
    rate = card_rate(gpu_class)
    if rate is None:
        return None
    lines: list[str] = []
    length, answer = workload.input_tokens, workload.output_tokens
    active = active_params(shape)
    flops = prompt_flops(shape, length)
    card_flops = rate.bf16_tflops * 1e12 * PREFILL_MFU
    prefill_s = flops / (card_flops * prefill_width)
    per_card_tps = length / (flops / card_flops)
    lines.append(
        f"prefill: {length} tokens × 2 × {active / 1e9:.1f} B active parameters + attention"
        f" = {flops / 1e12:.1f} TFLOP; a {gpu_class} does {rate.bf16_tflops:.0f} TFLOP/s rated,"
        f" {PREFILL_MFU:.0%} of it reached = {per_card_tps:,.0f} prompt tokens/s a card;"
        f" {prefill_width} cards: {_ms(prefill_s)} a prompt"
    )
    kv_moved = _kv_bytes(shape, length, prefill_width, kv_cache_dtype) * prefill_width
    transfer_s = kv_moved / (transfer_gbps * GB / 8) if transfer_gbps > 0 else math.inf
    lines.append(
        f"transfer: {kv_moved / GB:.2f} GB of KV a prompt (the plan's blocks,"
        f" {prefill_width} cards) over {transfer_label} at {transfer_gbps:,.0f} Gb/s"
        f" = {_ms(transfer_s)}"
    )
    batched_tokens, max_seqs = default_batching(card_memory_gib)
    kv_full = _kv_bytes(shape, length + answer, decode_width, kv_cache_dtype)
    kv_mean = _kv_bytes(shape, length + answer // 2, decode_width, kv_cache_dtype)
    bandwidth = rate.hbm_tbps * 1e12 * DECODE_BANDWIDTH_SHARE

    def step_s(batch: int) -> float:
        return (weights_bytes_per_card + batch * kv_mean) / bandwidth

    fits = int(kv_room_bytes_per_card // kv_full) if kv_full else max_seqs
    batch = min(fits, max_seqs)
    limit = "the KV room" if fits <= max_seqs else f"max_num_seqs {max_seqs}"
    if workload.itl_s is not None and fits >= 1:
        by_itl = int((workload.itl_s * bandwidth - weights_bytes_per_card) // kv_mean)
        if by_itl < batch:
            batch, limit = by_itl, f"the {_ms(workload.itl_s)} inter-token target"
    if batch < 1:
        verdict = (
            f"does not pay: one sequence of {length + answer} tokens needs"
            f" {kv_full / GB:.2f} GB of KV a decode card and the plan leaves"
            f" {kv_room_bytes_per_card / GB:.2f}: widen decode or plan a shorter context"
            if fits < 1
            else f"does not pay: even one sequence misses the inter-token target on"
            f" {decode_width} {gpu_class} (a step reads {weights_bytes_per_card / GB:.1f} GB of"
            f" weights a card at {rate.hbm_tbps} TB/s): widen decode"
        )
        return Advice(False, 1, 1, verdict, tuple(lines), {"prefill_s": prefill_s})
    decode_step = step_s(batch)
    decode_rps = batch / decode_step / answer
    lines.append(
        f"decode: a step reads {weights_bytes_per_card / GB:.1f} GB of weights + {batch} ×"
        f" {kv_mean / GB:.3f} GB of KV a card at {rate.hbm_tbps} TB/s,"
        f" {DECODE_BANDWIDTH_SHARE:.0%} reached = {_ms(decode_step)} a token; {batch} sequences"
        f" (held to it by {limit}) = {batch / decode_step:,.0f} tokens/s"
        f" = {decode_rps:.2f} answers of {answer} tokens/s a replica"
    )
    prefill_rps = PREFILL_BUSY / prefill_s
    prefill_replicas, decode_replicas = _ratio(decode_rps / prefill_rps)
    lines.append(
        f"ratio: a prefill replica takes {prefill_rps:.2f} prompts/s ({PREFILL_BUSY:.0%} busy),"
        f" a decode replica {decode_rps:.2f}: {decode_rps / prefill_rps:.2f} prefill replicas a"
        f" decode replica ≈ {prefill_replicas}:{decode_replicas}"
    )
    chunk = min(length, batched_tokens)
    chunk_s = prompt_flops(shape, chunk) / (card_flops * decode_width)
    together = decode_step + chunk_s
    lines.append(
        f"doing both: a {chunk}-token prefill chunk (max_num_batched_tokens {batched_tokens})"
        f" rides in a decode step: {_ms(decode_step)} + {_ms(chunk_s)} = {_ms(together)}"
        " between two tokens"
    )
    ttft = prefill_s + transfer_s
    figures = {
        "prefill_s": prefill_s,
        "prefill_tokens_per_s_per_card": per_card_tps,
        "kv_bytes_per_request": float(kv_moved),
        "transfer_s": transfer_s,
        "decode_step_s": decode_step,
        "decode_batch": float(batch),
        "itl_doing_both_s": together,
        "ttft_split_s": ttft,
        "prefill_per_decode": decode_rps / prefill_rps,
    }
    ratio = (prefill_replicas, decode_replicas)
    if transfer_s > prefill_s:
        verdict = (
            f"does not pay: moving a prompt's KV ({_ms(transfer_s)}) costs more than computing it"
            f" ({_ms(prefill_s)}) over {transfer_label}"
        )
        return Advice(False, *ratio, verdict, tuple(lines), figures)
    if workload.ttft_s is not None and ttft > workload.ttft_s:
        verdict = (
            f"does not pay: prefill and transfer take {_ms(ttft)}, past the"
            f" {_ms(workload.ttft_s)} time-to-first-token target: widen prefill"
        )
        return Advice(False, *ratio, verdict, tuple(lines), figures)
    if workload.itl_s is not None:
        breaks = together > workload.itl_s
        target = f"the {_ms(workload.itl_s)} inter-token target"
    else:
        breaks = chunk_s >= decode_step
        target = "twice a decode step"
    if not breaks:
        verdict = (
            f"does not pay: a replica doing both keeps {_ms(together)} between tokens with a"
            f" prefill chunk riding along, within {target}"
        )
        return Advice(False, *ratio, verdict, tuple(lines), figures)
    verdict = (
        f"pays at {prefill_replicas}:{decode_replicas}: a replica doing both stalls"
        f" {_ms(together)} between tokens when a prompt arrives, past {target}; apart, decode"
        f" keeps {_ms(decode_step)} and the first token comes in {_ms(ttft)}"
    )
    return Advice(True, *ratio, verdict, tuple(lines), figures)


GIB = 1024**3


def advise_way(
    shape: ModelShape,
    workload: Workload,
    way: Any,
    *,
    transfer_gbps: float,
    transfer_label: str,
    prefill_width: int | None = None,
    kv_cache_dtype: str | None = None,
) -> Advice | None:
    """`advise` for a planned way (`planner.way_record.Way`), sized by its memory plan: a decode
    card holds the way's weights and engine share, and the rest of its usable memory is KV."""
    room_gib = way.usable_gib - way.weights_gib - way.engine_gib - way.adapters_gib
    return advise(
        shape,
        workload,
        gpu_class=way.gpu_class,
        card_memory_gib=way.card_memory_gib,
        prefill_width=prefill_width or way.tensor_parallel,
        decode_width=way.tensor_parallel,
        weights_bytes_per_card=way.weights_gib * GIB,
        kv_room_bytes_per_card=max(0.0, room_gib) * GIB,
        transfer_gbps=transfer_gbps,
        transfer_label=transfer_label,
        kv_cache_dtype=kv_cache_dtype,
    )
