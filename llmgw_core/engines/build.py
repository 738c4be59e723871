"""A placed way → each node's shard: validated, then built by its engine (pure).

`build_launch` is the one entry point: it refuses what cannot work
(`validate.validate_launch`), asks the engine's builder for each node's
processes, and says which rank serves HTTP and where the agent checks its
health. Nothing here starts a process.
"""

from __future__ import annotations

from llmgw_core.engines import llamacpp, ray_cluster, sglang, sim, vllm
from llmgw_core.engines.keys import key_env
from llmgw_core.engines.programs import DEFAULT_PROGRAMS, is_llama_cpp_python
from llmgw_core.engines.spec import (
    ANY_ADDRESS,
    LLAMA_CPP,
    RAY,
    SGLANG,
    SIM,
    LaunchNode,
    LaunchPlan,
    LaunchRequest,
    ShardCommand,
    ShardLaunch,
    host_port,
)
from llmgw_core.engines.validate import validate_launch


def health_path(engine: str, program: tuple[str, ...] = ()) -> str:
    """The path an engine answers 200 on once it serves (never a log line).

    vLLM `/health` (503 once its engine died); SGLang `/health` (503 while
    starting, then a one-token generation); llama-server `/health` (503
    "Loading model", then 200); llama-cpp-python's server has no health
    route and answers `/openapi.json` once its model is loaded.
    """
    if engine == LLAMA_CPP:
        return llamacpp.health_path(program)
    return "/health"


def health_url(
    engine: str,
    http_host: str,
    http_port: int,
    program: tuple[str, ...] = (),
    *,
    tls: bool = False,
) -> str:
    """The URL the agent polls on the node itself (loopback when the engine binds every
    address); `https://` when the engine serves its replica's certificate."""
    host = "127.0.0.1" if http_host in ANY_ADDRESS else http_host
    scheme = "https" if tls else "http"
    return f"{scheme}://{host_port(host, http_port)}{health_path(engine, program)}"


def _commands(request: LaunchRequest, node: LaunchNode) -> tuple[ShardCommand, ...]:
    if request.engine == SGLANG:
        return sglang.commands(request, node)
    if request.engine == LLAMA_CPP:
        return llamacpp.commands(request, node)
    if request.engine == SIM:
        return sim.commands(request, node)
    return vllm.commands(request, node)


def _serves_http(request: LaunchRequest, node: LaunchNode) -> bool:
    # vLLM (Ray workers, headless ranks) and SGLang (ranks from 1 run
    # schedulers only) alike: rank 0 alone answers HTTP.
    return node.rank == request.head.rank


def _executor(request: LaunchRequest) -> str:
    if request.engine in (SGLANG, LLAMA_CPP):
        return request.engine
    return vllm.executor(request)


def build_launch(request: LaunchRequest) -> LaunchPlan:
    """Every node's shard for a placed way, rank 0 first.

    Raises:
        BadInput: the launch cannot work (see `validate.validate_launch`).
    """
    validate_launch(request)
    # One token per replica, on every shard: its Ray processes take only each other.
    ray_secret = (
        {ray_cluster.TOKEN_VARIABLE: ray_cluster.new_token()} if _executor(request) == RAY else {}
    )
    shards = []
    for node in request.ranked_nodes:
        serves = _serves_http(request, node)
        program = node.program or DEFAULT_PROGRAMS.get(request.engine, ())
        # Only the rank that serves HTTP holds the key: the others have no port to pin.
        tls = request.tls if serves else None
        shards.append(
            ShardLaunch(
                node=node.name,
                rank=node.rank,
                gpus=tuple(gpu.id for gpu in node.gpus),
                commands=_commands(request, node),
                serves_http=serves,
                health_url=health_url(
                    request.engine, node.bind, node.http_port, program, tls=tls is not None
                )
                if serves
                else None,
                http_port=node.http_port,
                http_host=node.reached_at,
                secret_env={
                    **request.secret_env,
                    **key_env(request, program),
                    **ray_secret,
                    **(tls.secret_env() if tls is not None else {}),
                },
                health_cert=tls.cert_pem if tls is not None else None,
                real=node.replayed and not node.simulated,
            )
        )
    executor = _executor(request)
    return LaunchPlan(
        engine=request.engine,
        executor=executor,
        shards=tuple(shards),
        health_path=health_path(request.engine, request.head.program),
        start_after_head=executor == RAY,
        tls_cert=request.tls.cert_pem if request.tls is not None else None,
        adapters=tuple(request.lora.recorded(request.engine)) if request.lora else (),
        adapter_only=request.lora is not None
        and request.engine == LLAMA_CPP
        and is_llama_cpp_python(request.head.program or DEFAULT_PROGRAMS[LLAMA_CPP]),
    )
