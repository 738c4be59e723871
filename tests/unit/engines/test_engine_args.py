"""The engine flags an operator passes: known, typed, never llmgw's own, and planned when they
change what a card holds."""

from __future__ import annotations

import pytest

from llmgw_core.catalog import catalog_model
from llmgw_core.engines.flags import (
    FLAGS,
    argv_of,
    checked_engine_args,
    plan_options,
    release_refusal,
)
from llmgw_core.errors import BadInput
from llmgw_core.planner.plan import plan
from llmgw_core.planner.pools import described_fleet
from llmgw_core.serve.args import ServeFields

LLAMA_8B = "catalog:meta-llama/Llama-3.1-8B-Instruct"
LLAMA_8B_GGUF = "catalog:lmstudio-community/Meta-Llama-3.1-8B-Instruct-GGUF"
H100 = [{"name": "dgx", "gpu": "h100-80g", "gpus": 8}]
CPU = [{"name": "cpu", "gpus": 0, "memory_gib": 64}]


def _best(ref: str, fleet: list[dict], engine: str, args: dict, **kw):
    found = plan(
        catalog_model(ref),
        described_fleet(fleet),
        context=32768,
        **plan_options(engine, checked_engine_args(engine, args)),
        **kw,
    )
    return next(way for way in found.options if way.engine == engine)


def test_fp8_kv_cache_takes_about_two_gib_less_a_card_for_an_8b_model_at_32k():
    plain = _best(LLAMA_8B, H100, "vllm", {})
    fp8 = _best(LLAMA_8B, H100, "vllm", {"kv_cache_dtype": "fp8"})
    assert plain.per_card_gib - fp8.per_card_gib == pytest.approx(2.0, abs=0.05)
    assert plain.context_gib - fp8.context_gib == pytest.approx(2.0, abs=0.05)


def test_sglangs_fp8_kv_cache_is_planned_too():
    plain = _best(LLAMA_8B, H100, "sglang", {})
    fp8 = _best(LLAMA_8B, H100, "sglang", {"kv_cache_dtype": "fp8_e5m2"})
    assert plain.context_gib - fp8.context_gib == pytest.approx(2.0, abs=0.05)


def test_a_smaller_share_of_the_card_is_what_the_plan_sizes_with():
    plain = _best(LLAMA_8B, H100, "vllm", {})
    half = _best(LLAMA_8B, H100, "vllm", {"gpu_memory_utilization": 0.5})
    assert half.usable_gib < plain.usable_gib * 0.6
    assert "--gpu-memory-utilization 0.50" in half.serve
    shared = _best(LLAMA_8B, H100, "sglang", {"mem_fraction_static": 0.5})
    assert "--mem-fraction-static 0.50" in shared.serve


def test_enforce_eager_frees_the_cuda_graphs_memory_in_the_plan():
    plain = _best(LLAMA_8B, H100, "vllm", {})
    eager = _best(LLAMA_8B, H100, "vllm", {"enforce_eager": True})
    assert eager.outside_gib < plain.outside_gib


def test_more_tokens_a_step_raise_vllms_activation_peak_in_the_plan():
    plain = _best(LLAMA_8B, H100, "vllm", {})
    bigger = _best(LLAMA_8B, H100, "vllm", {"max_num_batched_tokens": 65536})
    assert bigger.engine_gib > plain.engine_gib + 1
    assert "--max-num-batched-tokens 65536" in bigger.serve


def test_llama_cpp_without_flash_attention_needs_every_heads_scores_in_the_plan():
    plain = _best(LLAMA_8B_GGUF, CPU, "llama.cpp", {})
    off = _best(LLAMA_8B_GGUF, CPU, "llama.cpp", {"flash_attn": False})
    # 512 tokens × 32,768 cells × (32 heads + the mask) × 4 bytes: 2 GiB more than the logits
    assert off.engine_gib - plain.engine_gib > 1.5
    assert "--flash-attn off" in off.serve and "--flash-attn on" in plain.serve
    wider = _best(LLAMA_8B_GGUF, CPU, "llama.cpp", {"ubatch_size": 1024})
    assert wider.engine_gib == pytest.approx(2 * plain.engine_gib, rel=0.05)
    assert "--ubatch-size 1024" in wider.serve


def test_llama_cpps_quantised_kv_cache_is_planned_with_the_wider_of_its_halves():
    plain = _best(LLAMA_8B_GGUF, CPU, "llama.cpp", {})
    q8 = _best(LLAMA_8B_GGUF, CPU, "llama.cpp", {"cache_type_k": "q8_0", "cache_type_v": "q8_0"})
    assert q8.context_gib < plain.context_gib
    # V left at f16: the plan does not count on a smaller cache than llama.cpp keeps.
    half = _best(LLAMA_8B_GGUF, CPU, "llama.cpp", {"cache_type_k": "q8_0"})
    assert half.context_gib == plain.context_gib


def test_the_flags_are_written_in_the_engines_spelling():
    args = checked_engine_args(
        "vllm",
        {
            "enable-auto-tool-choice": True,
            "tool_call_parser": "hermes",
            "enable_prefix_caching": False,
            "seed": 7,
            "gpu_memory_utilization": 0.8,
        },
    )
    assert argv_of("vllm", args) == [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--no-enable-prefix-caching",
        "--seed",
        "7",
    ]  # the card's share is the plan's, written once by the builder
    assert argv_of("llama.cpp", checked_engine_args("llama.cpp", {"jinja": True})) == ["--jinja"]


@pytest.mark.parametrize(
    ("engine", "args", "said"),
    [
        ("vllm", {"tool_call_parsr": "hermes"}, "tool_call_parsr is not a flag llmgw knows vLLM"),
        ("vllm", {"enable_prefix_caching": "yes"}, "must be true or false, not 'yes'"),
        ("vllm", {"seed": "seven"}, "seed must be an integer"),
        ("vllm", {"seed": 1.5}, "seed must be an integer"),
        ("vllm", {"kv_cache_dtype": "int4"}, "kv_cache_dtype is 'int4', which vLLM does not take"),
        ("vllm", {"gpu_memory_utilization": 1.5}, "outside 0.05 to 1"),
        ("vllm", {"max_model_len": 8192}, "max_model_len is llmgw's to set (`context:` decides"),
        ("vllm", {"port": 9000}, "port is llmgw's to set"),
        ("vllm", {"tensor_parallel_size": 2}, "tensor_parallel_size is llmgw's to set"),
        ("vllm", {"served_model_name": "x"}, "served_model_name is llmgw's to set"),
        ("vllm", {"api_key": "sk-1"}, "api_key is llmgw's to set"),
        ("vllm", {"hf_token": "x"}, "would carry a secret on a command line"),
        ("vllm", {"chat_template": "/etc/passwd"}, "names a file or folder on the nodes"),
        ("vllm", {"swap_space": 8}, "the planner does not model it yet"),
        ("llama.cpp", {"ctx_size": 4096}, "ctx_size is llmgw's to set"),
        ("llama.cpp", {"batch_size": 4096}, "the planner does not model it yet"),
        ("llama.cpp", {"flash_attn": "maybe"}, "flash_attn must be true or false"),
        (
            "llama.cpp",
            {"flash_attn": False, "cache_type_v": "q8_0"},
            "cache_type_v=q8_0 needs flash attention",
        ),
        ("llama.cpp", {"ubatch_size": 4096}, "outside 1 to 2048"),
        ("llama.cpp", {"cache_type_k": True}, "cache_type_k is true, not a choice"),
        ("sglang", {"enable_auto_tool_choice": True}, "not a flag llmgw knows SGLang to take"),
    ],
)
def test_a_flag_refused_is_one_sentence(engine: str, args: dict, said: str):
    with pytest.raises(BadInput) as refused:
        checked_engine_args(engine, args)
    assert said in refused.value.sentence()


def test_engine_args_need_the_engine_they_belong_to():
    with pytest.raises(ValueError, match="engine_args needs engine:"):
        ServeFields.model_validate({"model": LLAMA_8B, "engine_args": {"seed": 1}})
    with pytest.raises(ValueError, match="port is llmgw's to set"):
        ServeFields.model_validate(
            {"model": LLAMA_8B, "engine": "vllm", "engine_args": {"port": 1}}
        )


def test_a_flag_younger_than_the_nodes_engine_is_named_with_both_releases():
    args = {"reasoning_parser": "deepseek_r1"}
    assert release_refusal("vllm", args, "0.7.3") == (
        "engine_args: reasoning_parser needs vLLM 0.8.0 or newer, and the node has 0.7.3"
    )
    assert release_refusal("vllm", args, "0.11.0") is None
    assert release_refusal("vllm", args, None) is None


def test_a_flag_the_nodes_engine_no_longer_takes_is_named_with_the_release_that_dropped_it():
    args = {"disable_log_requests": True}
    assert release_refusal("vllm", args, "0.11.0") is None
    assert release_refusal("vllm", args, "0.32.0") == (
        "engine_args: disable_log_requests is gone from vLLM 0.12.0 on, and the node has 0.32.0"
    )
    assert release_refusal("vllm", {"enable_log_requests": True}, "0.32.0") is None


def test_every_table_holds_only_flags_it_does_not_also_own():
    from llmgw_core.engines.flags import NOT_PLANNED, OWNED

    for engine, table in FLAGS.items():
        assert not set(table) & set(OWNED), engine
        assert not set(table) & NOT_PLANNED, engine


def test_the_node_page_names_each_shards_engine_flags():
    from llmgw_core.serve.view import ReplicaView, ShardView
    from llmgw_core.views.replicas import shards_on_node

    shard = ShardView(node="h100-a-01", rank=0, shard_id="s0", gpus=("GPU-0",), phase="running")
    flagged = ReplicaView(
        name="tools",
        spec={"engine_args": {"tool_call_parser": "hermes", "enable_prefix_caching": False}},
        shards=(shard,),
        phase="ready",
    )
    plain = ReplicaView(name="plain", spec={}, shards=(shard,), phase="ready")
    assert shards_on_node([flagged, plain], "h100-a-01") == [
        "tools r0 · GPU-0 · running · NCCL - · tool_call_parser=hermes enable_prefix_caching=false",
        "plain r0 · GPU-0 · running · NCCL -",
    ]
