"""The command that would start a planned way, shown beside the plan (pure).

These are previews for people and scripts: the full command line of the
engine, with long flag names, so an operator can read it and run it by hand.
The launcher (a later issue) builds the real environment and per-node ranks;
the flags that decide memory — widths, context, quantisation, utilisation —
come from here so the plan and the launch cannot disagree.

Every value is quoted for a POSIX shell: a repository id or a path typed by a
person never reaches a shell unquoted.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


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


def _join(parts: list[str]) -> str:
    return " ".join(shlex.quote(p) for p in parts)


def _vllm(spec: ServeSpec) -> list[str]:
    parts = ["vllm", "serve", spec.source]
    parts += ["--tensor-parallel-size", str(spec.tensor_parallel)]
    parts += ["--pipeline-parallel-size", str(spec.pipeline_parallel)]
    parts += ["--max-model-len", str(spec.context)]
    if spec.expert_parallel:
        parts.append("--enable-expert-parallel")
    if spec.quantization_flag:
        parts += ["--quantization", spec.quantization_flag]
    if spec.dtype_flag:
        parts += ["--dtype", spec.dtype_flag]
    if spec.gpu_memory_utilization is not None:
        parts += ["--gpu-memory-utilization", f"{spec.gpu_memory_utilization:.2f}"]
    if spec.concurrency > 1:
        parts += ["--max-num-seqs", str(spec.concurrency)]
    return parts


def _sglang(spec: ServeSpec) -> list[str]:
    parts = ["python", "-m", "sglang.launch_server", "--model-path", spec.source]
    parts += ["--tp-size", str(spec.tensor_parallel)]
    if spec.pipeline_parallel > 1:
        parts += ["--pp-size", str(spec.pipeline_parallel)]
    if spec.expert_parallel:
        parts += ["--ep-size", str(spec.tensor_parallel)]
    parts += ["--context-length", str(spec.context)]
    if spec.quantization_flag:
        parts += ["--quantization", spec.quantization_flag]
    if spec.dtype_flag:
        parts += ["--dtype", spec.dtype_flag]
    if spec.gpu_memory_utilization is not None:
        parts += ["--mem-fraction-static", f"{spec.gpu_memory_utilization:.2f}"]
    if spec.concurrency > 1:
        parts += ["--max-running-requests", str(spec.concurrency)]
    return parts


def _llama_cpp(spec: ServeSpec) -> list[str]:
    # llama-server divides --ctx-size among its --parallel slots, so N sequences
    # of C tokens need a context of N × C.
    parts = ["llama-server", "--model", spec.source]
    parts += ["--ctx-size", str(spec.context * spec.concurrency)]
    if spec.concurrency > 1:
        parts += ["--parallel", str(spec.concurrency)]
    parts += ["--n-gpu-layers", "0" if spec.on_cpu else "999"]
    if not spec.on_cpu and spec.pipeline_parallel > 1:
        parts += ["--split-mode", "layer"]
    return parts


def serve_command(spec: ServeSpec) -> str:
    """The shell command that starts `spec`, every value quoted."""
    if spec.engine == "vllm":
        return _join(_vllm(spec))
    if spec.engine == "sglang":
        return _join(_sglang(spec))
    if spec.engine == "llama.cpp":
        return _join(_llama_cpp(spec))
    raise ValueError(f"no serve command for engine {spec.engine!r}")
