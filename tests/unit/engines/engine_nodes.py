"""Nodes and requests as placement would hand them to the engine builders.

Figures follow the demo fleet's HGX H100 nodes (8 × H100 80 GB, compute
capability 9.0, ConnectX-7 on fabric `ib-a`, management on `eno1`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llmgw_core.engines import FabricAdapter, LaunchGpu, LaunchNode, LaunchRequest

LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"
H100_NAME = "NVIDIA H100 80GB HBM3"


def h100_cards(count: int = 8, first: int = 0) -> tuple[LaunchGpu, ...]:
    """Whole H100 cards `first`… of one node."""
    return tuple(
        LaunchGpu(
            id=str(index),
            card_index=index,
            gpu_class="h100-80g",
            name=H100_NAME,
            compute_capability="9.0",
        )
        for index in range(first, first + count)
    )


def ib_adapters(*names: str) -> tuple[FabricAdapter, ...]:
    """InfiniBand ports (port 1) by name."""
    return tuple(FabricAdapter(name=name, link_layer="InfiniBand") for name in names)


def h100_node(rank: int = 0, **changes: Any) -> LaunchNode:
    """An HGX H100 node on ib-a (two rails), vLLM 0.12.0 and Ray 2.52.0 installed in /opt/llm/venv."""
    node = LaunchNode(
        name=f"h100-a-{rank + 1:02d}",
        rank=rank,
        address=f"10.20.0.{11 + rank}",
        interface="eno1",
        gpus=h100_cards(),
        adapters=ib_adapters("mlx5_0", "mlx5_1"),
        fabric="ib-a",
        http_port=8000,
        engine_version="0.12.0",
        ray_version="2.52.0",
        program=("/opt/llm/venv/bin/vllm",),
    )
    return replace(node, **changes)


def request(nodes: tuple[LaunchNode, ...] | None = None, **changes: Any) -> LaunchRequest:
    """Llama-3.3-70B at 32k on the nodes given (one H100 node of 8 by default)."""
    nodes = nodes or (h100_node(),)
    cards = sum(len(node.gpus) for node in nodes)
    base = LaunchRequest(
        engine="vllm",
        source=LLAMA_70B,
        served_name="llama-70b",
        nodes=nodes,
        context=32768,
        planned_context=32768,
        tensor_parallel=cards // len(nodes),
        pipeline_parallel=len(nodes),
        gpu_memory_utilization=0.9,
    )
    return replace(base, **changes)


GGUF = "/var/lib/llmgw-models/Qwen2.5-7B-Instruct-Q4_K_M.gguf"


def llama_request(node: LaunchNode, **changes: Any) -> LaunchRequest:
    """Qwen2.5-7B's Q4_K_M GGUF at 8k on llama.cpp, on one node (its cards split by layer)."""
    return request(
        nodes=(node,),
        engine="llama.cpp",
        source=GGUF,
        served_name="qwen-7b",
        context=8192,
        planned_context=8192,
        tensor_parallel=1,
        pipeline_parallel=len(node.gpus) or 1,
        gpu_memory_utilization=None,
        **changes,
    )


def two_h100_nodes(**changes: Any) -> tuple[LaunchNode, LaunchNode]:
    """Two H100 nodes of ib-a, ranks 0 and 1."""
    return (h100_node(0, **changes), h100_node(1, **changes))


def flag(argv: tuple[str, ...], name: str) -> str | None:
    """The value after `name` in an argv, None when the flag is absent."""
    if name not in argv:
        return None
    return argv[argv.index(name) + 1]
