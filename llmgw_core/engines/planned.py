"""The command a planned way would run, before placement has chosen nodes (pure).

The plan shows, beside each way, the engine's command line. It is built by
the same builders the launch uses, on stand-in nodes (cards `0…`, rank 0 at
`HEAD_ADDRESS`), so a flag the plan shows is a flag the launch passes: the
two cannot drift apart. Rank 0's command is the one shown.
"""

from __future__ import annotations

from llmgw_core.engines import llamacpp, sglang, vllm
from llmgw_core.engines.flags import sized_flags
from llmgw_core.engines.spec import (
    LLAMA_CPP,
    SGLANG,
    LaunchGpu,
    LaunchNode,
    LaunchRequest,
    LoraLaunch,
)
from llmgw_core.memory.adapters import LoraSlots
from llmgw_core.memory.need import ENGINE_DEFAULTS, EngineOptions

HEAD_ADDRESS = "HEAD_ADDRESS"
"""Stands for rank 0's management address until placement knows it."""


def planned_argv(
    engine: str,
    source: str,
    *,
    context: int,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    expert_parallel: bool = False,
    quantization_flag: str | None = None,
    dtype_flag: str | None = None,
    gpu_memory_utilization: float | None = None,
    concurrency: int = 1,
    on_cpu: bool = False,
    served_name: str | None = None,
    http_port: int = 8000,
    engine_options: EngineOptions = ENGINE_DEFAULTS,
    lora: LoraLaunch | None = None,
) -> tuple[str, ...]:
    """Rank 0's engine command for a planned way (nothing is validated or placed).

    Args:
        engine: "vllm" | "sglang" | "llama.cpp".
        source: the repository id, or the GGUF file's path for llama.cpp.
        context: tokens of context a sequence may hold.
        tensor_parallel: cards a layer is cut across.
        pipeline_parallel: nodes for vLLM/SGLang; cards split by layer for llama.cpp.
        expert_parallel: spread a mixture of experts' experts over the cards.
        quantization_flag: `--quantization`, when the engine must be told.
        dtype_flag: `--dtype`, when the card cannot run the model's own.
        gpu_memory_utilization: the share of each card the engine may take.
        concurrency: sequences of `context` served at once.
        on_cpu: llama.cpp in a CPU node's RAM.
        served_name: the name clients ask for (the source when not given).
        http_port: the port shown.
        engine_options: the memory flags the plan sized with, written as the launch writes them.
        lora: the LoRA adapters the plan made room for, as the launch starts them.
    """
    if engine == LLAMA_CPP:
        cards = 0 if on_cpu else tensor_parallel * pipeline_parallel
        node_count, per_node = 1, cards
    else:
        node_count, per_node = pipeline_parallel, tensor_parallel
    nodes = tuple(
        LaunchNode(
            name=f"node-{rank}",
            rank=rank,
            address=HEAD_ADDRESS if rank == 0 else f"NODE_{rank}_ADDRESS",
            gpus=tuple(
                LaunchGpu(id=str(index), card_index=index, gpu_class="planned")
                for index in range(per_node)
            ),
            http_port=http_port,
        )
        for rank in range(node_count)
    )
    request = LaunchRequest(
        engine=engine,
        source=source,
        served_name=served_name or source,
        nodes=nodes,
        context=context,
        tensor_parallel=tensor_parallel,
        pipeline_parallel=pipeline_parallel,
        expert_parallel=expert_parallel,
        quantization_flag=quantization_flag,
        dtype_flag=dtype_flag,
        gpu_memory_utilization=gpu_memory_utilization,
        concurrency=concurrency,
        engine_args=sized_flags(engine, engine_options),
        lora=lora,
    )
    head = request.head
    if engine == SGLANG:
        return sglang.commands(request, head)[-1].argv
    if engine == LLAMA_CPP:
        return llamacpp.commands(request, head)[-1].argv
    return vllm.commands(request, head)[-1].argv


def lora_launch(slots: LoraSlots | None) -> LoraLaunch | None:
    """The adapters as the engine is started with them: each by its path on the nodes (the
    same absolute path as here for a local one, which `serve` copies; where `serve` put a Hub
    one, else its repository id, which vLLM and SGLang fetch themselves)."""
    if slots is None:
        return None
    return LoraLaunch(
        adapters=tuple((a.name, a.source) for a in slots.adapters),
        max_loras=slots.max_loras,
        max_lora_rank=slots.max_lora_rank,
        max_cpu_loras=slots.max_cpu_loras,
    )
