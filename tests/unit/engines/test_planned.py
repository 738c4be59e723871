"""The command shown beside a plan comes from the launch's own builders."""

from __future__ import annotations

from engine_nodes import LLAMA_70B, flag

from llmgw_core.engines.planned import HEAD_ADDRESS, planned_argv


def test_a_planned_vllm_way_over_two_nodes_shows_rank_0s_command():
    argv = planned_argv(
        "vllm",
        LLAMA_70B,
        context=32768,
        tensor_parallel=8,
        pipeline_parallel=2,
        gpu_memory_utilization=0.9,
    )
    assert argv[:3] == ("vllm", "serve", LLAMA_70B)
    assert flag(argv, "--nnodes") == "2"
    assert flag(argv, "--node-rank") == "0"
    assert flag(argv, "--master-addr") == HEAD_ADDRESS
    assert flag(argv, "--served-model-name") == LLAMA_70B
