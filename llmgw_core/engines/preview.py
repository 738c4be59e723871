"""The command that would start a planned way, shown beside the plan (pure).

These are previews for people and scripts: rank 0's full command line,
with long flag names, so an operator can read it and run it by hand. It is
built by the same builders the launch uses, so the plan and the launch
cannot disagree.

Every value is quoted for a POSIX shell: a repository id or a path typed by a
person never reaches a shell unquoted.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from llmgw_core.engines.planned import planned_argv


@dataclass(frozen=True)
class ServeSpec:
    """What a serve command needs to say.

    Attributes:
        engine: "vllm" | "sglang" | "llama.cpp".
        source: the repository id (vLLM, SGLang) or the GGUF file's path (llama.cpp).
        context: the context length to serve, tokens.
        tensor_parallel: cards a layer is cut across.
        pipeline_parallel: stages (nodes for vLLM/SGLang; cards for llama.cpp's layer split).
        expert_parallel: spread a mixture of experts' experts over the cards.
        quantization_flag: the value of `--quantization`, when the engine must be told.
        gpu_memory_utilization: the share of each card the engine may take.
        dtype_flag: the value of `--dtype` when the card cannot run the model's own dtype.
        concurrency: sequences of `context` served at once.
        on_cpu: llama.cpp with no layer offloaded to a GPU.
    """

    engine: str
    source: str
    context: int
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    expert_parallel: bool = False
    quantization_flag: str | None = None
    gpu_memory_utilization: float | None = None
    dtype_flag: str | None = None
    concurrency: int = 1
    on_cpu: bool = False


def serve_command(spec: ServeSpec) -> str:
    """The shell command that starts `spec`, every value quoted.

    Built by the launch's own builders (`planned_argv`), so a flag the plan
    shows is a flag the launch passes.
    """
    argv = planned_argv(
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
    return shlex.join(argv)
