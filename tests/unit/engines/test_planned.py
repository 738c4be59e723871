"""The command shown beside a plan comes from the launch's own builders."""

from __future__ import annotations

import shlex

from engine_nodes import LLAMA_70B, flag

from llmgw_core.engines.planned import HEAD_ADDRESS, planned_argv
from llmgw_core.engines.preview import ServeSpec, serve_command

# The flags that decide what a card holds: the plan and the launch must agree on them.
MEMORY_FLAGS = {
    "vllm": (
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--max-model-len",
        "--quantization",
        "--dtype",
        "--gpu-memory-utilization",
        "--max-num-seqs",
    ),
    "sglang": (
        "--tp-size",
        "--pp-size",
        "--ep-size",
        "--context-length",
        "--quantization",
        "--mem-fraction-static",
        "--max-running-requests",
    ),
    "llama.cpp": ("--ctx-size", "--parallel", "--n-gpu-layers", "--split-mode"),
}


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


def test_the_memory_flags_agree_with_the_plans_preview():
    cases = [
        ServeSpec("vllm", LLAMA_70B, 32768, 4, 1, False, "fp8", 0.9, "half", 8),
        ServeSpec("vllm", "Qwen/Qwen3-235B-A22B", 32768, 8, 2, True, None, 0.88, None, 1),
        ServeSpec("sglang", LLAMA_70B, 16384, 8, 2, True, "fp8", 0.85, None, 4),
        ServeSpec("llama.cpp", "models/q4.gguf", 8192, 1, 2, concurrency=4),
        ServeSpec("llama.cpp", "models/q4.gguf", 8192, 1, 1, on_cpu=True),
    ]
    for spec in cases:
        shown = shlex.split(serve_command(spec))
        built = planned_argv(
            spec.engine,
            spec.source,
            context=spec.context,
            tensor_parallel=spec.tensor_parallel,
            pipeline_parallel=spec.pipeline_parallel,
            expert_parallel=spec.expert_parallel,
            quantization_flag=spec.quantization_flag,
            dtype_flag=spec.dtype_flag,
            gpu_memory_utilization=spec.gpu_memory_utilization,
            concurrency=spec.concurrency,
            on_cpu=spec.on_cpu,
        )
        for name in MEMORY_FLAGS[spec.engine]:
            assert flag(tuple(shown), name) == flag(built, name), (spec, name)
        assert ("--enable-expert-parallel" in shown) == ("--enable-expert-parallel" in built)
