"""vLLM's commands: one node, or several joined by Ray or by its own multiprocessing (pure).

Across nodes vLLM has two ways to join them:

* **Ray** (every version): rank 0 starts a Ray head and waits for its port,
  the other nodes join it as Ray workers, and `vllm serve` runs on rank 0
  alone with `--distributed-executor-backend ray`. Ray takes its environment
  when it starts, so the NCCL variables go on `ray start` too, on every node.
  Every Ray process keeps its files in a private folder and demands the
  replica's token (`engines.ray_cluster`); a Ray without tokens is refused.
* **Multiprocessing** (0.12 on: `--nnodes` first appears there): every node
  runs `vllm serve` with `--nnodes N --node-rank R --master-addr HEAD
  --master-port PORT`; ranks from 1 on add `--headless` and serve no HTTP.

Which one follows the version installed on the nodes, unless the request
names one. The backend is always passed explicitly: vLLM's default changed
between versions, and Ray is optional in recent ones.
"""

from __future__ import annotations

import json

from llmgw_core.engines.disagg import launch_env, launch_flags
from llmgw_core.engines.environment import shard_env
from llmgw_core.engines.flags import argv_of
from llmgw_core.engines.identity import tls_flags
from llmgw_core.engines.programs import DEFAULT_PROGRAMS, at_least, ray_program
from llmgw_core.engines.ray_cluster import (
    DEFAULT_RAY_PORT,
    auth_env,
    driver_env,
    head_argv,
    worker_argv,
)
from llmgw_core.engines.spec import (
    MULTIPROCESSING,
    RAY,
    VLLM,
    LaunchNode,
    LaunchRequest,
    ShardCommand,
)
from llmgw_core.memory.adapters import default_vllm_rank

MP_MULTI_NODE_SINCE = (0, 12)
"""vLLM joins nodes without Ray from 0.12.0 (`--nnodes`, `--node-rank`, `--master-addr`)."""

DEFAULT_MASTER_PORT = 29501
SINGLE = "single"


def executor(request: LaunchRequest) -> str:
    """ "single" on one node; else the request's choice, or "mp" from 0.12 on and "ray" before.

    A version the node did not report is taken as a current one (mp): vLLM
    then names an unknown flag itself, where Ray missing from a recent
    install would fail less clearly.
    """
    if not request.multi_node:
        return SINGLE
    if request.executor is not None:
        return request.executor
    supports_mp = at_least(request.head.engine_version, MP_MULTI_NODE_SINCE)
    return RAY if supports_mp is False else MULTIPROCESSING


def _program(node: LaunchNode) -> tuple[str, ...]:
    return node.program or DEFAULT_PROGRAMS[VLLM]


def model_flags(request: LaunchRequest) -> list[str]:
    """The flags that say what is served and how it is cut (the same on every rank)."""
    flags = [
        "--served-model-name",
        request.served_name,
        "--tensor-parallel-size",
        str(request.tensor_parallel),
        "--pipeline-parallel-size",
        str(request.pipeline_parallel),
        "--max-model-len",
        str(request.context),
    ]
    if request.expert_parallel:
        flags.append("--enable-expert-parallel")
    if request.quantization_flag:
        flags += ["--quantization", request.quantization_flag]
    if request.dtype_flag:
        flags += ["--dtype", request.dtype_flag]
    if request.gpu_memory_utilization is not None:
        flags += ["--gpu-memory-utilization", f"{request.gpu_memory_utilization:.2f}"]
    if request.concurrency > 1:
        flags += ["--max-num-seqs", str(request.concurrency)]
    return flags + lora_flags(request) + argv_of("vllm", request.engine_args)


def lora_flags(request: LaunchRequest) -> list[str]:
    """`--enable-lora` and its room, and each adapter as `--lora-modules`' JSON form, which
    names the served model as its base (`/v1/models` then gives it as the adapter's parent)."""
    lora = request.lora
    if lora is None:
        return []
    flags = ["--enable-lora", "--max-loras", str(lora.max_loras)]
    flags += ["--max-lora-rank", str(default_vllm_rank(lora.max_lora_rank))]
    if lora.max_cpu_loras is not None:
        flags += ["--max-cpu-loras", str(lora.max_cpu_loras)]
    flags.append("--lora-modules")
    flags += [
        json.dumps({"name": name, "path": path, "base_model_name": request.served_name})
        for name, path in lora.adapters
    ]
    return flags


def _http_flags(request: LaunchRequest, node: LaunchNode) -> list[str]:
    flags = ["--host", node.bind, "--port", str(node.http_port)]
    if request.tls is not None:  # HTTPS with the replica's own certificate (engines.identity)
        flags += tls_flags("--ssl-certfile", "--ssl-keyfile")
    return flags


def _serve(request: LaunchRequest, node: LaunchNode) -> list[str]:
    argv = [*_program(node), "serve", request.source, *model_flags(request)]
    return argv + launch_flags(request, node)  # a prefill or decode worker's connector


def commands(request: LaunchRequest, node: LaunchNode) -> tuple[ShardCommand, ...]:
    """The processes of `node`'s shard, in start order."""
    env = {**launch_env(request, node), **shard_env(request, node)}
    head = request.head
    mode = executor(request)
    if mode == SINGLE:
        argv = _serve(request, node) + _http_flags(request, node)
        if request.tensor_parallel * request.pipeline_parallel > 1:
            argv += ["--distributed-executor-backend", MULTIPROCESSING]
        return (ShardCommand("vllm", tuple(argv), env),)
    if mode == RAY:
        ray_port = request.rendezvous_port or DEFAULT_RAY_PORT
        ray = ray_program(_program(node))
        # Set after the operator's `--env`, so no variable of theirs turns the token off.
        ray_env = {**env, **auth_env()}
        if node.rank != head.rank:
            join = worker_argv(ray, head, node, ray_port)
            return (ShardCommand("ray-worker", join, ray_env),)
        start = head_argv(ray, node, ray_port)
        argv = _serve(request, node) + _http_flags(request, node)
        argv += ["--distributed-executor-backend", RAY]
        return (
            ShardCommand("ray-head", start, ray_env, role="sidecar", wait_for_port=ray_port),
            ShardCommand("vllm", tuple(argv), {**env, **driver_env(head, ray_port)}),
        )
    master_port = request.rendezvous_port or DEFAULT_MASTER_PORT
    argv = _serve(request, node)
    argv += ["--distributed-executor-backend", MULTIPROCESSING]
    argv += ["--nnodes", str(len(request.nodes)), "--node-rank", str(node.rank)]
    argv += ["--master-addr", head.address, "--master-port", str(master_port)]
    if node.rank == head.rank:
        argv += _http_flags(request, node)
    else:
        argv.append("--headless")
    return (ShardCommand("vllm", tuple(argv), env),)
