"""Each side's batch shape of a prefill/decode split (`planner.pd_shape`): from the real plan of
Llama-3.3-70B on the demo's H100 pair, by hand for the edges, and as a property over any KV room
and workload."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw_core.catalog import catalog_model
from llmgw_core.planner.pd_ratio import Workload
from llmgw_core.planner.pd_shape import (
    DECODE_STEP_FLOOR,
    DEFAULT_STEP_TOKENS,
    PREFILL_MAX_SEQS,
    side_shape,
    split_shapes,
    vllm_step_kv_cost,
    way_kv_tokens,
)
from llmgw_core.planner.plan import plan
from llmgw_core.planner.pools import described_fleet

LLAMA_70B = "catalog:meta-llama/Llama-3.3-70B-Instruct"
H100_PAIR = [{"name": "h100-a", "count": 2, "gpu": "h100-80g", "gpus": 8, "fabric": "ib-a"}]
CONTEXT = 16384


@pytest.fixture(scope="module")
def llama():
    model = catalog_model(LLAMA_70B)
    the_plan = plan(model, described_fleet(H100_PAIR), format="safetensors", context=CONTEXT)
    way = the_plan.best
    assert (way.gpu_class, way.tensor_parallel, way.nodes) == ("h100-80g", 4, 1)
    return model, way


def _four_card_ways(model, concurrency: int):
    found = plan(
        model,
        described_fleet(H100_PAIR),
        format="safetensors",
        context=CONTEXT,
        concurrency=concurrency,
    )
    return [w for w in found.options if (w.engine, w.tensor_parallel, w.nodes) == ("vllm", 4, 1)]


def test_the_kv_room_is_what_a_plan_at_a_sides_concurrency_checks(llama):
    """Why no second plan is made for a side's sequences: the plan at the most whole contexts
    the way's KV room holds fits the 4-card way, one more does not, and the room it reports is
    the same whatever the concurrency."""
    model, way = llama
    most = math.floor(way.max_concurrency)
    at_most = _four_card_ways(model, most)
    assert at_most and at_most[0].max_concurrency == pytest.approx(way.max_concurrency)
    assert not _four_card_ways(model, most + 1)


def test_a_long_prompt_workload_gives_prefill_few_sequences_and_a_step_that_takes_a_whole_prompt(
    llama,
):
    _model, way = llama
    shapes = split_shapes(
        "vllm",
        {"prefill": way, "decode": way},
        context=CONTEXT,
        workload=Workload(input_tokens=12000, output_tokens=500),
    )
    prefill, decode = shapes["prefill"], shapes["decode"]
    kv = way_kv_tokens(way, CONTEXT)
    assert prefill.max_seqs == min(kv // 12000, PREFILL_MAX_SEQS) == PREFILL_MAX_SEQS
    assert prefill.step_tokens == 12000
    assert prefill.engine_args("vllm") == {"max_num_batched_tokens": "12000"}
    assert prefill.arithmetic == (
        f"prefill: {kv:,} KV tokens ÷ 12,000 a prompt = {kv // 12000},"
        f" at most {PREFILL_MAX_SEQS} → {PREFILL_MAX_SEQS} sequences;"
        " max_num_batched_tokens 12,000 (a whole prompt of 12,000)"
    )
    assert decode.max_seqs == kv // 12500 and decode.max_seqs * 12500 <= kv
    assert decode.step_tokens == DECODE_STEP_FLOOR
    assert decode.arithmetic == (
        f"decode: {kv:,} KV tokens ÷ 12,500 a whole context = {kv // 12500}"
        f" → {kv // 12500} sequences; max_num_batched_tokens 256 (one token a sequence,"
        " at least 256)"
    )


def test_without_a_workload_each_sequence_is_taken_at_the_whole_context(llama):
    _model, way = llama
    shapes = split_shapes("vllm", {"prefill": way, "decode": way}, context=CONTEXT)
    kv = way_kv_tokens(way, CONTEXT)
    assert kv == math.floor(way.max_concurrency * CONTEXT)
    assert shapes["decode"].max_seqs == kv // CONTEXT == math.floor(way.max_concurrency)
    assert shapes["prefill"].step_tokens == CONTEXT


def test_a_short_prompt_keeps_the_engines_default_step_on_the_prefill_side():
    shape = side_shape("prefill", "vllm", kv_tokens=400_000, context=CONTEXT, input_tokens=1500)
    assert shape.step_tokens == DEFAULT_STEP_TOKENS
    assert shape.arithmetic.endswith("max_num_batched_tokens 8,192 (the engine's default)")


def test_the_operators_step_budget_wins_and_vllm_sequences_stay_within_it():
    shape = side_shape(
        "decode", "vllm", kv_tokens=10_000_000, context=CONTEXT, input_tokens=100, step_tokens=64
    )
    assert (shape.step_tokens, shape.max_seqs) == (64, 64)
    assert "at most the step's 64" in shape.arithmetic and "(the operator's)" in shape.arithmetic


def test_a_decode_side_whose_kv_holds_no_whole_context_still_runs_one_sequence_and_says_so():
    shape = side_shape(
        "decode", "vllm", kv_tokens=5000, context=CONTEXT, input_tokens=8000, output_tokens=200
    )
    assert shape.max_seqs == 1
    assert "= 0 (one at least) → 1 sequences" in shape.arithmetic


def test_sglangs_decode_keeps_its_own_chunk_and_its_prefill_takes_chunked_prefill_size():
    decode = side_shape("decode", "sglang", kv_tokens=400_000, context=CONTEXT)
    assert decode.step_tokens is None and decode.engine_args("sglang") == {}
    prefill = side_shape("prefill", "sglang", kv_tokens=400_000, context=CONTEXT)
    assert prefill.engine_args("sglang") == {"chunked_prefill_size": str(CONTEXT)}


def test_a_side_without_a_planned_way_keeps_the_services_shape():
    assert split_shapes("vllm", {"prefill": None, "decode": None}, context=CONTEXT) == {}


@settings(max_examples=400, deadline=None)
@given(
    engine=st.sampled_from(["vllm", "sglang"]),
    role=st.sampled_from(["prefill", "decode"]),
    kv_tokens=st.integers(min_value=0, max_value=50_000_000),
    context=st.integers(min_value=1, max_value=1_048_576),
    input_tokens=st.none() | st.integers(min_value=1, max_value=16_777_216),
    output_tokens=st.integers(min_value=1, max_value=16_777_216),
    step_tokens=st.none() | st.integers(min_value=1, max_value=1_048_576),
    unchunked=st.booleans(),
    kv_per_step_token=st.integers(min_value=0, max_value=200),
)
def test_any_room_and_workload_give_a_shape_the_engine_takes_and_the_kv_holds(
    engine,
    role,
    kv_tokens,
    context,
    input_tokens,
    output_tokens,
    step_tokens,
    unchunked,
    kv_per_step_token,
):
    def cost(step: int) -> int:
        return max(0, step - 2048) * kv_per_step_token

    shape = side_shape(
        role,
        engine,
        kv_tokens=kv_tokens,
        context=context,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        step_tokens=step_tokens,
        whole_prompt_steps=unchunked and engine == "vllm",
        step_kv_cost=cost if engine == "vllm" else None,
    )
    assert shape.max_seqs >= 1
    assert shape.sequence_tokens <= context
    if engine == "vllm":
        assert shape.step_tokens is not None and shape.step_tokens >= shape.max_seqs
    if step_tokens is not None and shape.step_tokens is not None:
        assert shape.step_tokens == step_tokens
    elif unchunked and engine == "vllm":
        assert shape.step_tokens is not None and shape.step_tokens >= context
    if role == "decode":
        assert shape.max_seqs == 1 or shape.max_seqs * shape.sequence_tokens <= kv_tokens
    else:
        assert shape.max_seqs <= PREFILL_MAX_SEQS
        paid = cost(shape.step_tokens) if engine == "vllm" and step_tokens is None else 0
        room = kv_tokens - paid
        assert shape.max_seqs == 1 or shape.max_seqs * shape.sequence_tokens <= room
    assert shape.arithmetic.startswith(f"{role}: ") and "\n" not in shape.arithmetic


def test_vllm_without_chunked_prefill_gets_steps_of_the_whole_context_on_both_sides(llama):
    """vLLM refuses a `max_num_batched_tokens` below `max_model_len` when chunked prefill is
    off: the decode side's short step would stop it at start-up."""
    _model, way = llama
    shapes = split_shapes(
        "vllm",
        {"prefill": way, "decode": way},
        context=CONTEXT,
        workload=Workload(input_tokens=2000, output_tokens=200),
        engine_args={"enable_chunked_prefill": False},
    )
    assert shapes["prefill"].step_tokens == shapes["decode"].step_tokens == CONTEXT
    assert shapes["prefill"].arithmetic.endswith("(the context: chunked prefill is off)")
    assert shapes["decode"].arithmetic.endswith(
        "max_num_batched_tokens 16,384 (the context: chunked prefill is off)"
    )


def test_a_prefill_step_past_the_plans_takes_its_activation_from_the_prefill_sides_kv(llama):
    """vLLM profiles its activation at `max_num_batched_tokens` before it sizes the KV: the
    70B's plan profiled 8192 tokens, where the sampler's warm-up (1024 rows of the vocabulary)
    is the peak, so a 12,000-token step costs nothing more, and a 16,384-token one does."""
    model, way = llama
    cost = vllm_step_kv_cost(model.any_shape, way)
    assert cost(8192) == cost(12000) == 0
    assert cost(16384) == 3636
    shapes = split_shapes(
        "vllm", {"prefill": way, "decode": way}, context=CONTEXT, model_shape=model.any_shape
    )
    kv = way_kv_tokens(way, CONTEXT)
    assert shapes["prefill"].step_tokens == CONTEXT
    assert shapes["prefill"].arithmetic.startswith(
        f"prefill: ({kv:,} − 3,636 for the step's activation) KV tokens ÷ 16,384 a prompt ="
        f" {(kv - 3636) // CONTEXT}"
    )
    assert "activation" not in shapes["decode"].arithmetic


def test_a_prefill_step_whose_activation_would_crowd_the_prompt_out_stays_the_default():
    shape = side_shape(
        "prefill",
        "vllm",
        kv_tokens=40_000,
        context=CONTEXT,
        input_tokens=16_000,
        step_kv_cost=lambda step: 30_000 if step > DEFAULT_STEP_TOKENS else 0,
    )
    assert (shape.step_tokens, shape.max_seqs) == (DEFAULT_STEP_TOKENS, 2)
    assert shape.arithmetic.endswith("max_num_batched_tokens 8,192 (the engine's default)")
