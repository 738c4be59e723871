"""A placed choice → the engines' launch request, and the spec every shard carries (pure).

The engines package builds each shard's commands from a `LaunchRequest`;
this module fills one in from what serve decided — the way, the nodes and
cards placement chose, the ports — and writes the replica's spec, which the
agents keep beside each shard so that any console can reassemble the
replica later (`replica_view.assemble`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from llmgw_core.engines import LaunchPlan, LaunchRequest, launch_node, redact_env
from llmgw_core.engines.identity import EngineIdentity
from llmgw_core.engines.spec import LoraLaunch, PdLaunch, ShardLaunch
from llmgw_core.fabric.rails import RailChoice
from llmgw_core.facts import NodeFacts
from llmgw_core.inventory import NodeSpec
from llmgw_core.placement import Placement
from llmgw_core.serve.choice import Choice
from llmgw_core.serve.view import SPEC_KIND

HTTP_BASE_PORT = 8000
"""The first HTTP port an engine is given on a real node (then 8001 … when taken)."""

RENDEZVOUS_BASE_PORT = 29500
"""The first port rank 0 offers the others to join on (Ray head, vLLM master, SGLang init)."""

_NAME = re.compile(r"[^a-z0-9]+")


def replica_name(model: str) -> str:
    """A replica name from a model: `meta-llama/Llama-3.3-70B-Instruct` → `llama-3-3-70b-instruct`."""
    tail = model.rstrip("/").split("/")[-1].lower().removesuffix(".gguf")
    return _NAME.sub("-", tail).strip("-")[:48] or "replica"


def default_replica_name(model: Any) -> str:
    """The name `serve` gives a replica of `model` (a `ModelInfo`) when none is asked for: its
    Hub id's (a catalog model's too), else the reference's (a path, a file)."""
    return replica_name(model.repo_id or model.ref)


def free_port_on(used: set[int], base: int) -> int:
    """The first port from `base` that no running shard of the node uses."""
    port = base
    while port in used:
        port += 1
    return port


def launch_request(
    choice: Choice,
    placement: Placement,
    specs: Mapping[str, NodeSpec],
    facts: Mapping[str, NodeFacts],
    *,
    served_name: str,
    context: int,
    concurrency: int,
    http_ports: Mapping[str, int],
    rendezvous_port: int | None,
    extra_env: Mapping[str, str],
    secret_env: Mapping[str, str] | None = None,
    api_key: str | None = None,
    source: str | None = None,
    rails: RailChoice | None = None,
    engine_args: Mapping[str, str | bool] | None = None,
    tls: EngineIdentity | None = None,
    cpu_bind: str | None = None,
    lora: LoraLaunch | None = None,
    pd: PdLaunch | None = None,
) -> LaunchRequest:
    """The request the engine builders turn into each node's shard.

    `rails` names the adapters each node leaves out of `NCCL_IB_HCA`; `tls` is the
    replica's certificate and key (its engine serves HTTPS with them); `cpu_bind`
    the cores of vLLM on a CPU node (`engines.cpu_bind`), None for vLLM's own choice;
    `pd` a prefill or decode worker's part (`engines.disagg`), None for a replica doing both.

    Raises:
        BadInput: a node lacks a card or the fabric (see `engines.launch_node`).
    """
    nodes = tuple(
        launch_node(
            specs[placed.node],
            facts[placed.node],
            engine=choice.engine,
            rank=placed.rank,
            gpu_ids=placed.gpu_ids,
            http_port=http_ports[placed.node],
            fabric=placement.fabric,
            nvlink_domain=placement.nvlink_domain,
            left_out=rails.adapters_left_out(placed.node) if rails else frozenset(),
        )
        for placed in placement.nodes
    )
    return LaunchRequest(
        engine=choice.engine,
        source=source or choice.source,
        served_name=served_name,
        nodes=nodes,
        context=context,
        planned_context=context,
        tensor_parallel=choice.tensor_parallel,
        pipeline_parallel=choice.pipeline_parallel,
        expert_parallel=choice.expert_parallel,
        quantization_flag=choice.quantization_flag,
        quantization=choice.quantization,
        min_compute_capability=choice.min_compute_capability,
        dtype_flag=choice.dtype_flag,
        engine_args=dict(engine_args or {}),
        gpu_memory_utilization=choice.gpu_memory_utilization,
        concurrency=concurrency,
        extra_env=dict(extra_env),
        secret_env=dict(secret_env or {}),
        api_key=api_key,
        rendezvous_port=rendezvous_port,
        tls=tls,
        cpu_kv_cache_gib=choice.cpu_kv_cache_gib,
        cpu_bind=cpu_bind,
        lora=lora,
        pd=pd,
    )


def replica_spec(
    *,
    name: str,
    model: str,
    served_name: str,
    choice: Choice,
    placement: Placement,
    plan: LaunchPlan,
    context: int,
    env: Mapping[str, str],
    created_at: float,
    attempt: int,
) -> dict[str, Any]:
    """What every shard of the replica carries, for any console to reassemble it."""
    head = plan.head
    return {
        "name": name,
        "model": model,
        "served_name": served_name,
        "engine": choice.engine,
        "executor": plan.executor,
        "way": choice.as_dict(),
        "placement": placement.as_dict(),
        "fabric": placement.fabric,
        "nvlink_domain": placement.nvlink_domain,
        "context": context,
        "env": redact_env(dict(env)),
        "head": head.node,
        "http_port": head.http_port,
        "http_host": head.http_host,
        "health_path": plan.health_path,
        # Public: every caller (console, gateway) pins rank 0's engine to it.
        "tls_cert": plan.tls_cert,
        "adapters": [dict(a) for a in plan.adapters],
        "adapter_only": plan.adapter_only,
        "created_at": created_at,
        "attempt": attempt,
    }


def shard_spec(replica: Mapping[str, Any], shard: ShardLaunch) -> dict[str, Any]:
    """The opaque `spec` one shard is started with: the replica's, and its own engine line."""
    main = shard.main
    return {
        "kind": SPEC_KIND,
        "replica": dict(replica),
        "launch": {
            "argv": list(main.argv),
            "env": redact_env(dict(main.env)),
            "http_port": shard.http_port,
        },
    }
