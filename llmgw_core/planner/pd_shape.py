"""Each side of a prefill/decode split with its own batch shape, from its memory plan (pure).

A replica that does both prefill and decode runs one compromise: a step
budget (vLLM's `max_num_batched_tokens`, SGLang's `chunked_prefill_size`)
short enough that a prompt's chunk does not stall the decodes riding in the
same step, and as many sequences as the service's `concurrency:`. Apart,
each side runs the shape its work wants:

* **prefill**: long steps, few sequences. A prompt should go through in one
  step where the budget allows, so its KV is ready to move as soon as it
  can be; the sequences it holds at once are the prompts in flight (computed
  or waiting for the decode side to pull their KV), each `input_tokens`
  long, so the side's KV room bounds them, and beyond `PREFILL_MAX_SEQS`
  more would only queue behind the compute.
* **decode**: many sequences, each holding the whole context's KV (its
  prompt, received, and its answer, grown): as many as the side's KV room
  holds at `input + output` tokens each (the engine's default sequence cap
  above it), and a step budget no larger than one token a sequence needs,
  with a floor for the odd prompt a decode worker still computes itself (a
  transfer that failed).

Why the KV room of the side's way is the bound, and no second plan is
needed for the sequences: in both memory rules `concurrency` enters only as
the KV of that many whole contexts (`context_gib`), checked against the
card's room; `max_concurrency` is that room divided by one context's KV,
whatever the concurrency (`memory.vllm.card_need`, `memory.sglang`), and
vLLM's engine share is profiled at its default `max_num_seqs`, not at ours.
So a plan at a side's sequences fits exactly when those sequences' tokens
fit the way's KV room, which is what this rule holds them to.

What a longer prefill step costs is counted by the memory rule itself: vLLM
profiles its activation peak at `max_num_batched_tokens` before it sizes the
KV cache, and the plan profiled it at the engine's default step, so a longer
step takes the difference (`memory.vllm_overheads.activation_bytes` at both)
out of the prefill side's KV tokens (`vllm_step_kv_cost`). Where the prompts
then no longer fit, the step stays the default. SGLang keeps its activations
outside `mem_fraction_static`, and its plan does not model the chunk.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmgw_core.memory.vllm import default_batching
from llmgw_core.memory.vllm_overheads import activation_bytes
from llmgw_core.memory.weights import serve_dtype_for
from llmgw_core.model.artifacts import GIB

PREFILL_MAX_SEQS = 16
"""The most prompts a prefill worker holds at once: more would only wait behind its compute."""
DECODE_STEP_FLOOR = 256
"""The least step budget a decode worker keeps, for a prompt it computes itself."""
DEFAULT_STEP_TOKENS = 8192
"""The step budget (vLLM's `max_num_batched_tokens` on cards of 70 GiB and more, SGLang's
`chunked_prefill_size` on Hopper) a prefill worker keeps at least."""
DEFAULT_MAX_SEQS = 1024
"""The engines' default sequence cap on large cards (vLLM's `max_num_seqs`)."""
STEP_FLAG = {"vllm": "max_num_batched_tokens", "sglang": "chunked_prefill_size"}
"""Each engine's step budget flag, in `engine_args` spelling."""


@dataclass(frozen=True)
class SideShape:
    """One side's batch shape and how it was reached.

    Attributes:
        role: `prefill` or `decode`.
        max_seqs: sequences at once (`--max-num-seqs` / `--max-running-requests`).
        step_tokens: the step budget, None where the engine's own is kept (SGLang's decode,
            which does no chunked prefill).
        sequence_tokens: the tokens one sequence holds (a prompt; a whole context).
        kv_tokens: the KV tokens the side's way holds, as its memory plan computed them.
        arithmetic: the one line that says how.
    """

    role: str
    max_seqs: int
    step_tokens: int | None
    sequence_tokens: int
    kv_tokens: int
    arithmetic: str

    def engine_args(self, engine: str) -> dict[str, str]:
        """The step budget as the engine's flag (`engine_args` spelling), none to keep its own."""
        flag = STEP_FLAG.get(engine)
        if flag is None or self.step_tokens is None:
            return {}
        return {flag: str(self.step_tokens)}

    def as_dict(self) -> dict[str, Any]:
        """The shape as `explain` and the dry run give it."""
        return {
            "max_seqs": self.max_seqs,
            "step_tokens": self.step_tokens,
            "sequence_tokens": self.sequence_tokens,
            "kv_tokens": self.kv_tokens,
            "arithmetic": self.arithmetic,
        }


def way_kv_tokens(way: Any, context: int) -> int:
    """The KV tokens a way holds: the plan's figure where it fixes one, else its most
    sequences of `context` times the context."""
    if getattr(way, "kv_tokens", None):
        return int(way.kv_tokens)
    concurrency = getattr(way, "max_concurrency", None) or 0.0
    return max(0, math.floor(concurrency * context))


def vllm_step_kv_cost(shape: Any, way: Any) -> Callable[[int], int]:
    """The KV tokens a vLLM way gives up for a step longer than its plan's: the activation
    peak at that step less the one the plan profiled (the default step on the way's card),
    over the KV one token takes on a card."""
    default_step, default_seqs = default_batching(way.card_memory_gib)
    serve_dtype = serve_dtype_for(shape, None)
    per_token = way.context_gib_per_1k_tokens * GIB / 1000

    def peak(tokens: int) -> int:
        return activation_bytes(
            shape,
            tensor_parallel=way.tensor_parallel,
            max_num_batched_tokens=tokens,
            max_num_seqs=default_seqs,
            serve_dtype=serve_dtype,
            last_stage=True,
        )

    def cost(step: int) -> int:
        if step <= default_step or per_token <= 0:
            return 0
        return math.ceil((peak(step) - peak(default_step)) / per_token)

    return cost


def side_shape(
    role: str,
    engine: str,
    *,
    kv_tokens: int,
    context: int,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    step_tokens: int | None = None,
    whole_prompt_steps: bool = False,
    step_kv_cost: Callable[[int], int] | None = None,
) -> SideShape:
    """The batch shape of one side of a split.

    Args:
        role: `prefill` or `decode`.
        engine: `vllm` or `sglang` (vLLM needs its budget at least its sequences).
        kv_tokens: the KV tokens the side's way holds (`way_kv_tokens`).
        context: the service's context, the longest a sequence may grow.
        input_tokens, output_tokens: the workload's prompt and answer lengths, None for the
            whole context (a prompt that fills it; the whole context for a sequence).
        step_tokens: the operator's own step budget (`engine_args`), which wins.
        whole_prompt_steps: vLLM with chunked prefill turned off (`enable_chunked_prefill:
            false`), which refuses a step shorter than the context: both sides' own budgets
            are then the context.
        step_kv_cost: the KV tokens a prefill step of so many tokens takes from the side
            beyond what its plan counted (`vllm_step_kv_cost`), None: nothing.
    """
    prompt = min(input_tokens or context, context)
    if role == "prefill":
        whole = min(prompt, max(kv_tokens, 1))
        budget = step_tokens or max(DEFAULT_STEP_TOKENS, whole)
        if whole_prompt_steps and not step_tokens:
            budget = max(budget, context)
        cost = step_kv_cost if step_kv_cost and not step_tokens else (lambda _step: 0)
        given_up = cost(budget)
        if (
            given_up
            and kv_tokens - given_up < prompt
            and budget > DEFAULT_STEP_TOKENS
            and not whole_prompt_steps
        ):
            # The longer step would crowd the prompt out (on a small card even the default
            # step is past the plan's, and still paid).
            budget = DEFAULT_STEP_TOKENS
            given_up = cost(budget)
        room = max(0, kv_tokens - given_up)
        fits = room // prompt
        seqs = max(1, min(fits, PREFILL_MAX_SEQS))
        kv_text = (
            f"({kv_tokens:,} − {given_up:,} for the step's activation)"
            if given_up
            else f"{kv_tokens:,}"
        )
        held = f"{kv_text} KV tokens ÷ {prompt:,} a prompt = {fits:,}"
        held += f", at most {PREFILL_MAX_SEQS}" if fits > PREFILL_MAX_SEQS else ""
        why = (
            "the operator's"
            if step_tokens
            else f"a whole prompt of {prompt:,}"
            if budget == prompt
            else "the context: chunked prefill is off"
            if whole_prompt_steps and budget == context
            else "the engine's default"
        )
        sequence = prompt
    else:
        sequence = min(prompt + (output_tokens or 0), context) if input_tokens else context
        fits = kv_tokens // sequence
        seqs = max(1, min(fits, DEFAULT_MAX_SEQS))
        held = f"{kv_tokens:,} KV tokens ÷ {sequence:,} a whole context = {fits:,}"
        held += f", at most {DEFAULT_MAX_SEQS}" if fits > DEFAULT_MAX_SEQS else ""
        budget = step_tokens or (max(seqs, DECODE_STEP_FLOOR) if engine == "vllm" else None)
        why = (
            "the operator's"
            if step_tokens
            else f"one token a sequence, at least {DECODE_STEP_FLOOR}"
        )
    if whole_prompt_steps and not step_tokens and budget is not None and budget < context:
        budget, why = context, "the context: chunked prefill is off"
    if engine == "vllm" and budget is not None and seqs > budget:
        seqs = budget  # vLLM refuses max_num_seqs above max_num_batched_tokens
        held += f", at most the step's {budget:,}"
    flag = STEP_FLAG.get(engine, "step budget")
    step_text = f"{flag} {budget:,} ({why})" if budget is not None else f"{flag}: the engine's own"
    arithmetic = (
        f"{role}: {held}" + (" (one at least)" if fits < 1 else "") + f" → {seqs:,} sequences;"
        f" {step_text}"
    )
    return SideShape(role, seqs, budget, sequence, kv_tokens, arithmetic)


def split_shapes(
    engine: str,
    ways: dict[str, Any],
    *,
    context: int,
    workload: Any | None = None,
    engine_args: dict[str, Any] | None = None,
    model_shape: Any | None = None,
) -> dict[str, SideShape]:
    """Both sides' shapes, each from its own way (`serve.disagg_explain.side_way`); a side
    whose way the plan does not give (no plan) is left out, and keeps the service's shape.

    Args:
        engine: the engine both sides run.
        ways: per role, the side's planned way (or None).
        context: the service's context.
        workload: `disaggregation.workload` (`planner.pd_ratio.Workload`), None for whole
            contexts.
        engine_args: the operator's checked flags; their step budget wins on both sides.
        model_shape: the model's shape (`ModelShape`), for what a vLLM prefill step longer
            than the plan's takes from its KV; None: not counted.
    """
    given = (engine_args or {}).get(STEP_FLAG.get(engine, ""))
    step = int(given) if given is not None and int(given) > 0 else None
    unchunked = engine == "vllm" and (engine_args or {}).get("enable_chunked_prefill") is False
    shapes: dict[str, SideShape] = {}
    for role, way in ways.items():
        if way is None:
            continue
        shapes[role] = side_shape(
            role,
            engine,
            kv_tokens=way_kv_tokens(way, context),
            context=context,
            input_tokens=workload.input_tokens if workload is not None else None,
            output_tokens=workload.output_tokens if workload is not None else None,
            step_tokens=step,
            whole_prompt_steps=unchunked,
            step_kv_cost=vllm_step_kv_cost(model_shape, way)
            if engine == "vllm" and role == "prefill" and model_shape is not None
            else None,
        )
    return shapes
