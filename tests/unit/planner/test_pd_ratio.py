"""The ratio advisor for Llama-3.3-70B on the demo's H100 pair (4-card ways of the real plan,
KV over ib-a's eight rails): three workloads, each answer with its arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw_core.catalog import catalog_model
from llmgw_core.planner.pd_ratio import (
    Workload,
    active_params,
    advise,
    advise_way,
    prompt_flops,
)
from llmgw_core.planner.plan import plan
from llmgw_core.planner.pools import described_fleet

LLAMA_70B = "catalog:meta-llama/Llama-3.3-70B-Instruct"
H100_PAIR = [{"name": "h100-a", "count": 2, "gpu": "h100-80g", "gpus": 8, "fabric": "ib-a"}]
IB_A = {"transfer_gbps": 8 * 370.0, "transfer_label": "8 rails of ib-a, measured"}


@pytest.fixture(scope="module")
def llama():
    model = catalog_model(LLAMA_70B)
    way = plan(model, described_fleet(H100_PAIR), format="safetensors", context=16384).best
    assert (way.gpu_class, way.tensor_parallel, way.nodes) == ("h100-80g", 4, 1)
    return model.any_shape, way


def _advice(llama, workload: Workload, **transfer):
    shape, way = llama
    advice = advise_way(shape, workload, way, **(transfer or IB_A))
    assert advice is not None
    return advice


def test_long_prompts_and_short_answers_split_with_many_prefill_replicas(llama):
    advice = _advice(llama, Workload(input_tokens=8000, output_tokens=200, ttft_s=2, itl_s=0.05))
    assert advice.pays
    assert (advice.prefill_replicas, advice.decode_replicas) == (7, 1)
    assert advice.verdict.startswith("pays at 7:1: a replica doing both stalls")
    prefill, transfer, decode, ratio, both = advice.arithmetic
    assert prefill.startswith("prefill: 8000 tokens × 2 × 68.5 B active parameters + attention")
    assert "989 TFLOP/s rated, 45% of it reached" in prefill
    assert transfer.startswith("transfer: 2.62 GB of KV a prompt") and "2,960 Gb/s" in transfer
    assert "held to it by the KV room" in decode
    assert ratio.endswith("≈ 7:1")
    assert both.startswith("doing both: a 8000-token prefill chunk (max_num_batched_tokens 8192)")


def test_short_prompts_and_long_answers_do_not_pay_for_a_split(llama):
    advice = _advice(llama, Workload(input_tokens=200, output_tokens=2000, ttft_s=1, itl_s=0.05))
    assert not advice.pays
    assert (advice.prefill_replicas, advice.decode_replicas) == (1, 8)
    assert advice.verdict.startswith("does not pay: a replica doing both keeps")
    assert "within the 50.0 ms inter-token target" in advice.verdict


def test_chat_splits_four_prefill_to_one_decode(llama):
    advice = _advice(llama, Workload(input_tokens=1500, output_tokens=300, ttft_s=1, itl_s=0.05))
    assert advice.pays
    assert (advice.prefill_replicas, advice.decode_replicas) == (4, 1)
    assert advice.figures["ttft_split_s"] < 1
    assert advice.figures["itl_doing_both_s"] > 0.05 > advice.figures["decode_step_s"]


def test_over_tcp_moving_the_kv_costs_more_than_computing_it(llama):
    advice = _advice(
        llama,
        Workload(input_tokens=8000, output_tokens=200, itl_s=0.05),
        transfer_gbps=25.0,
        transfer_label="TCP on the management network",
    )
    assert not advice.pays
    assert advice.verdict.startswith("does not pay: moving a prompt's KV (")
    assert "over TCP on the management network" in advice.verdict


def test_an_inter_token_target_no_single_sequence_meets_asks_for_a_wider_decode(llama):
    advice = _advice(llama, Workload(input_tokens=1000, output_tokens=100, itl_s=0.005))
    assert not advice.pays and advice.verdict.endswith("widen decode")


def test_the_kv_a_prompt_moves_is_the_plans_block_rounded_bytes(llama):
    shape, _ = llama
    advice = advise(
        shape,
        Workload(input_tokens=8000, output_tokens=1),
        gpu_class="h100-80g",
        card_memory_gib=79.19,
        prefill_width=4,
        decode_width=4,
        weights_bytes_per_card=35e9,
        kv_room_bytes_per_card=30e9,
        **IB_A,
    )
    # 80 layers × 2 × 8 KV heads × 128 × 2 bytes, rounded up to 16-token blocks (8000 is whole).
    assert advice.figures["kv_bytes_per_request"] == 80 * 2 * 8 * 128 * 2 * 8000


def test_a_mixture_of_experts_counts_only_the_experts_a_token_meets():
    shape = catalog_model("catalog:Qwen/Qwen3-235B-A22B").any_shape
    assert 20e9 < active_params(shape) < 24e9
    assert prompt_flops(shape, 1000) < prompt_flops(catalog_model(LLAMA_70B).any_shape, 1000)


def test_a_mig_instance_or_an_unlisted_card_gets_no_advice_rather_than_a_guess(llama):
    shape, _ = llama
    figures = {
        "card_memory_gib": 40.0,
        "prefill_width": 1,
        "decode_width": 1,
        "weights_bytes_per_card": 1e9,
        "kv_room_bytes_per_card": 1e9,
        **IB_A,
    }
    workload = Workload(input_tokens=100, output_tokens=100)
    assert advise(shape, workload, gpu_class="a100-80g-mig-3g.40gb", **figures) is None


@settings(max_examples=150, deadline=None)
@given(
    input_tokens=st.integers(1, 200_000),
    output_tokens=st.integers(1, 20_000),
    ttft_s=st.one_of(st.none(), st.floats(0.01, 60)),
    itl_s=st.one_of(st.none(), st.floats(0.001, 1)),
    transfer_gbps=st.floats(0.1, 20_000),
    widths=st.sampled_from([(1, 1), (2, 4), (4, 4), (8, 2)]),
    room_gib=st.floats(0, 60),
)
def test_any_workload_gets_an_answer_with_small_ratio_terms_and_its_sums(
    input_tokens, output_tokens, ttft_s, itl_s, transfer_gbps, widths, room_gib
):
    shape = catalog_model(LLAMA_70B).any_shape
    advice = advise(
        shape,
        Workload(
            input_tokens=input_tokens, output_tokens=output_tokens, ttft_s=ttft_s, itl_s=itl_s
        ),
        gpu_class="h100-80g",
        card_memory_gib=79.19,
        prefill_width=widths[0],
        decode_width=widths[1],
        weights_bytes_per_card=141e9 / widths[1],
        kv_room_bytes_per_card=room_gib * 2**30,
        transfer_gbps=transfer_gbps,
        transfer_label="a rail",
    )
    assert advice is not None
    assert 1 <= advice.prefill_replicas <= 8 and 1 <= advice.decode_replicas <= 8
    assert advice.verdict.startswith(("pays at", "does not pay"))
    assert advice.arithmetic and all(line for line in advice.arithmetic)
    if room_gib == 0:
        assert "GB of KV a decode card and the plan leaves 0.00" in advice.verdict
    if advice.pays:
        assert advice.figures["transfer_s"] <= advice.figures["prefill_s"]
        assert ttft_s is None or advice.figures["ttft_split_s"] <= ttft_s
