"""Planning whole models against described fleets: the ways offered, their order, and why not."""

from __future__ import annotations

import pytest

from llmgw_core.catalog import catalog_model, known_models
from llmgw_core.errors import BadInput
from llmgw_core.planner.plan import plan
from llmgw_core.planner.pools import described_fleet

TWO_DGX = [
    {"name": "dgx", "count": 2, "gpu": "h100-80g", "gpus": 8, "fabric": "ib-a"},
    {"name": "cpu1", "gpus": 0, "memory_gib": 512},
]
LLAMA_70B = "catalog:meta-llama/Llama-3.3-70B-Instruct"
QWEN_235B = "catalog:Qwen/Qwen3-235B-A22B"
QWEN_14B_GGUF = "catalog:Qwen/Qwen2.5-14B-Instruct-GGUF"


def _plan(ref: str, fleet: list[dict], **kw):
    kw.setdefault("context", 32768)
    return plan(catalog_model(ref), described_fleet(fleet), **kw)


def test_llama_70b_at_32k_on_two_h100_nodes_is_best_on_4_cards_of_one_node():
    result = _plan(LLAMA_70B, TWO_DGX, format="safetensors")
    best = result.best
    assert (best.engine, best.cards, best.nodes, best.tensor_parallel, best.pipeline_parallel) == (
        "vllm",
        4,
        1,
        4,
        1,
    )
    assert best.gpu_class == "h100-80g" and best.free_now
    assert round(best.weights_gib, 1) == 32.9
    assert round(best.context_gib, 1) == 2.5
    assert best.usable_gib == pytest.approx(71.27, abs=0.01)
    assert (
        best.memory_text().startswith("39.5 GB a card")
        and "(weights 32.9 + context 2.5 + engine " in best.memory_text()
    )
    assert round(result.context_gib_per_1k_tokens, 2) == 0.31
    assert best.serve.startswith("vllm serve meta-llama/Llama-3.3-70B-Instruct ")
    for flag in ("--tensor-parallel-size 4", "--pipeline-parallel-size 1", "--max-model-len 32768"):
        assert flag in best.serve


def test_every_way_is_listed_best_first_and_both_engines_offered():
    result = _plan(LLAMA_70B, TWO_DGX, format="safetensors")
    vllm = [
        (w.tensor_parallel, w.nodes) for w in result.options if w.engine == "vllm" and not w.on_cpu
    ]
    assert vllm == [(4, 1), (8, 1)]
    assert [w.engine for w in result.options[:2]] == ["vllm", "sglang"]


def test_several_nodes_are_offered_only_for_fewer_cards_than_one_node_takes():
    # One node holds it on 4 cards; 2 + 2 over two nodes is as many cards, so not listed.
    result = _plan(LLAMA_70B, TWO_DGX, format="safetensors", context=32768)
    assert all(w.nodes == 1 for w in result.options)
    # One card a node: only several nodes hold it, as few as fit (not all four): two
    # stages of 65.7 GiB weights each leave room for 8192 tokens within vLLM's budget.
    thin = [{"name": "n", "count": 4, "gpu": "h100-80g", "gpus": 1, "fabric": "ib-a"}]
    spread = _plan(LLAMA_70B, thin, format="safetensors", context=8192)
    ways = spread.options
    vllm = {(w.nodes, w.pipeline_parallel, w.tensor_parallel) for w in ways if w.engine == "vllm"}
    assert vllm == {(2, 2, 1)}


def test_qwen3_235b_at_bf16_runs_8_wide_with_expert_parallel():
    result = _plan(QWEN_235B, TWO_DGX, format="safetensors")
    best = result.best
    assert (best.cards, best.nodes, best.tensor_parallel) == (8, 1, 8)
    assert best.expert_parallel
    assert "--enable-expert-parallel" in best.serve
    assert best.precision == "bf16" and best.quantization is None


def test_a_width_of_12_is_never_offered_for_8_kv_heads_even_on_a_16_card_node():
    fleet = [{"name": "big", "gpu": "h100-80g", "gpus": 16}]
    result = _plan(LLAMA_70B, fleet, format="safetensors", context=8192)
    widths = {w.tensor_parallel for w in result.options}
    assert 12 not in widths
    # 2 wide fits at 8192 within vLLM's budget (its context and graphs sit beside it).
    assert widths == {2, 4, 8, 16}


def test_a_mig_instance_serves_a_replica_alone():
    fleet = [{"name": "a100m", "gpu": "a100-80g-mig-3g.40gb", "gpus": 7, "fabric": "ib-a"}]
    small = _plan("catalog:meta-llama/Llama-3.1-8B-Instruct", fleet, context=8192)
    assert small.options and all(w.cards == 1 and w.nodes == 1 for w in small.options)
    assert any("a MIG instance serves a replica alone" in note for note in small.notes)
    big = _plan(LLAMA_70B, fleet, format="safetensors")
    assert big.best is None


def test_a_gguf_file_runs_on_a_cpu_node_from_a_downloaded_path():
    fleet = [{"name": "cpu1", "gpus": 0, "memory_gib": 512}]
    result = _plan(QWEN_14B_GGUF, fleet)
    best = result.best
    assert best.on_cpu and best.engine == "llama.cpp" and best.cards == 0
    assert best.needs_download
    assert best.source == "models/Qwen/Qwen2.5-14B-Instruct-GGUF/qwen2.5-14b-instruct-q8_0.gguf"
    assert "--n-gpu-layers 0" in best.serve
    assert best.label() == "CPU node"


def test_safetensors_run_on_a_cpu_node_with_vllm_a_rank_on_each_numa_node_it_needs():
    one = [{"name": "cpu1", "gpus": 0, "memory_gib": 64}]
    result = _plan("catalog:meta-llama/Llama-3.1-8B-Instruct", one, context=8192)
    best = result.best
    assert (best.engine, best.on_cpu, best.tensor_parallel, best.cards) == ("vllm", True, 1, 0)
    # 8192 tokens × 128 KiB a token (32 layers × 8 KV heads × 128 × K and V × 2 bytes) is
    # exactly 1 GiB: the whole GiB VLLM_CPU_KVCACHE_SPACE is given, 8192 tokens, one request.
    assert (best.cpu_kv_cache_gib, best.kv_tokens, best.max_concurrency) == (1, 8192, 1.0)
    assert best.serve.startswith("VLLM_CPU_KVCACHE_SPACE=1 vllm serve ")
    assert best.layout_text() == "vLLM in RAM, 1 NUMA node"
    # 70B at bf16 (131 GiB) fits no 128 GiB NUMA node: two of them, a rank each.
    two = [{"name": "cpu2", "gpus": 0, "memory_gib": 256, "numa_nodes": 2}]
    wide = _plan(LLAMA_70B, two, context=8192, format="safetensors").best
    assert (wide.engine, wide.tensor_parallel, wide.card_memory_gib) == ("vllm", 2, 128.0)
    assert "--tensor-parallel-size 2" in wide.serve
    assert wide.layout_text() == "vLLM in RAM, 2 NUMA nodes"
    four = [{"name": "cpu4", "gpus": 0, "memory_gib": 256, "numa_nodes": 4}]
    assert _plan(LLAMA_70B, four, context=8192, format="safetensors").best.tensor_parallel == 4
    big = [{"name": "cpu2", "gpus": 0, "memory_gib": 512, "numa_nodes": 2}]
    assert _plan(LLAMA_70B, big, context=8192, format="safetensors").best.tensor_parallel == 1


def test_quantised_safetensors_are_not_planned_on_vllms_cpu_backend():
    fleet = [{"name": "cpu1", "gpus": 0, "memory_gib": 2048}]
    awq = "catalog:" + next(ref for ref in known_models() if ref.endswith("-GPTQ"))
    result = _plan(awq, fleet, context=4096)
    assert result.best is None


def test_among_gguf_files_on_one_card_the_better_precision_up_to_8_bits_wins():
    fleet = [{"name": "dgx", "gpu": "h100-80g", "gpus": 8}]
    result = _plan(QWEN_14B_GGUF, fleet)
    one_card = [w.artifact for w in result.options if w.cards == 1]
    assert one_card[0] == "Q8_0"
    assert one_card.index("Q6_K") < one_card.index("Q4_K_M") < one_card.index("Q2_K")
    assert all(w.engine == "llama.cpp" for w in result.options)


def test_a_pcie_box_runs_a_model_on_one_card_when_it_fits_and_says_wider_ways_go_over_pcie():
    fleet = [{"name": "pcie", "gpu": "l40s-48g", "gpus": 4, "nvlink": False}]
    result = _plan("catalog:meta-llama/Llama-3.1-8B-Instruct", fleet, context=8192)
    assert result.best is not None and result.best.tensor_parallel == 1
    wider = [w for w in result.options if w.tensor_parallel > 1]
    assert wider and all(w.over_pcie and w.layout_text().endswith("over PCIe") for w in wider)
    assert any("share no NVLink" in note and "over PCIe" in note for note in result.notes)


def test_a_model_too_big_for_one_pcie_card_is_split_over_pcie():
    fleet = [{"name": "pcie", "gpu": "l40s-48g", "gpus": 4, "nvlink": False}]
    result = _plan(LLAMA_70B, fleet, context=8192, format="safetensors")
    assert result.best is not None
    assert (result.best.tensor_parallel, result.best.over_pcie) == (4, True)
    assert result.best.layout_text() == "vLLM TP4 over PCIe"


def test_nodes_on_two_fabrics_are_never_one_replica():
    split = [
        {"name": "a", "count": 2, "gpu": "h100-80g", "gpus": 1, "fabric": "ib-a"},
        {"name": "b", "gpu": "h100-80g", "gpus": 1, "fabric": "ib-b"},
    ]
    assert _plan(LLAMA_70B, split, format="safetensors").best is None
    joined = [{"name": "a", "count": 3, "gpu": "h100-80g", "gpus": 1, "fabric": "ib-a"}]
    best = _plan(LLAMA_70B, joined, format="safetensors").best
    assert (best.nodes, best.pipeline_parallel, best.tensor_parallel) == (3, 3, 1)
    assert best.label() == "3 nodes × 1 × h100-80g on ib-a"


def test_an_nvlink_domain_spans_its_trays():
    fleet = [
        {"name": "nvl", "count": 18, "gpu": "gb200-186g", "gpus": 4, "nvlink_domain": "nvl72-a"}
    ]
    result = _plan("catalog:Qwen/Qwen3-235B-A22B", fleet, format="safetensors")
    assert result.best is not None
    several = [w for w in result.options if w.nodes > 1]
    assert several and all(w.interconnect == "nvl72-a" for w in several)


def test_when_every_way_uses_busy_cards_it_says_which_to_free():
    fleet = [{"name": "dgx", "count": 2, "gpu": "h100-80g", "gpus": 8, "busy": 6}]
    result = _plan(LLAMA_70B, fleet, format="safetensors")
    assert result.best is not None and not result.best.free_now
    assert result.advice == (
        "free 4 h100-80g cards of one node: every way that fits uses busy cards now",
    )


def test_when_nothing_fits_it_says_what_would():
    fleet = [{"name": "dgx", "count": 1, "gpu": "h100-80g", "gpus": 4, "fabric": "ib-a"}]
    result = _plan(QWEN_235B, fleet, format="safetensors")
    assert result.best is None
    sentence = result.does_not_fit_sentence()
    assert sentence.startswith(
        "Qwen/Qwen3-235B-A22B at a context of 32768 tokens fits nowhere in this fleet"
    )
    assert "a 4-bit version" in sentence
    assert "nodes of 4 × h100-80g on one fabric (h100-80g on ib-a has 1)" in sentence


def test_a_shorter_context_is_offered_when_that_is_what_it_takes():
    fleet = [{"name": "box", "gpu": "h100-80g", "gpus": 1}]
    result = _plan("catalog:meta-llama/Llama-3.1-8B-Instruct", fleet, context=131072, concurrency=8)
    assert result.best is None
    assert any(
        line.startswith("a context of ") and "(not 131072) on 1 × h100-80g" in line
        for line in result.advice
    )


def test_a_context_longer_than_trained_is_bad_input():
    with pytest.raises(BadInput, match="longer than the 40960 tokens the model was trained for"):
        _plan(QWEN_235B, TWO_DGX, context=131072)


def test_each_file_has_its_own_row_with_its_best_way():
    result = _plan(QWEN_14B_GGUF, TWO_DGX)
    names = [row.name for row in result.artifacts]
    assert names == ["Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "F16"]
    q4 = result.artifacts[2]
    assert round(q4.size_gib, 2) == 8.37
    assert q4.best is not None and q4.best.artifact == "Q4_K_M"


def test_a_model_whose_shape_is_unknown_is_bad_input():
    from llmgw_core.model.artifacts import Artifact
    from llmgw_core.model.source import ModelInfo

    gguf = Artifact("Q4_K_M", "gguf", ("m-Q4_K_M.gguf",), 4_000_000_000)
    model = ModelInfo("org/m-GGUF", "org/m-GGUF", None, None, None, (gguf,))
    with pytest.raises(BadInput, match="the model's shape is unknown"):
        plan(model, described_fleet(TWO_DGX), context=8192)


def test_safetensors_too_big_for_a_cpu_node_say_what_would_make_them_fit():
    fleet = [{"name": "cpu1", "gpus": 0, "memory_gib": 16}]
    result = _plan("catalog:meta-llama/Llama-3.1-8B-Instruct", fleet, context=8192)
    assert result.best is None
    assert len(result.advice) == 1 and result.advice[0].endswith(" GGUF of it on a CPU node")


def test_cards_free_on_several_nodes_are_offered_when_one_node_has_too_few_free():
    fleet = [{"name": "dgx", "count": 2, "gpu": "h100-80g", "gpus": 8, "fabric": "ib-a", "busy": 6}]
    result = _plan(LLAMA_70B, fleet, format="safetensors")
    assert not result.best.free_now and result.best.nodes == 1
    spread = [w for w in result.options if w.engine == "vllm" and w.nodes == 2]
    assert [(w.tensor_parallel, w.free_now) for w in spread] == [(2, True)]
    assert result.advice == ()


def test_a_one_node_way_is_listed_once_when_two_fabrics_offer_the_same_class():
    fleet = [
        {"name": "a", "gpu": "h100-80g", "gpus": 8, "fabric": "ib-a"},
        {"name": "b", "gpu": "h100-80g", "gpus": 8, "fabric": "ib-b"},
    ]
    result = _plan(LLAMA_70B, fleet, format="safetensors", context=32768)
    one_node = [
        (w.engine, w.tensor_parallel) for w in result.options if w.nodes == 1 and w.cards > 1
    ]
    assert len(one_node) == len(set(one_node))
    assert ("vllm", 4) in one_node
