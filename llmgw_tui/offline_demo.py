"""The demo fleet's snapshot built offline: the same facts `--demo` shows, with no SSH.

Each demo node's hardware profile is written by the simulator, read back by
the real agent's discovery and validated by the core's facts model — the path
the live demo takes, minus the SSH servers — so tests and screenshots show
exactly what `llmgw-tui --demo` shows, deterministically.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from llmgw_agent.discover import collect_facts
from llmgw_agent.sim.profiles import write_profile
from llmgw_core.facts import parse_facts
from llmgw_core.fleet.sim.demo import demo_nodes
from llmgw_core.fleet.state import FleetState, NodeState
from llmgw_core.serve.loads import ReplicaLoad
from llmgw_core.serve.view import SPEC_KIND, ReplicaView, assemble

FROZEN_AT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
"""The one moment every offline snapshot is taken at (no clocks in pictures)."""


def offline_demo_state(root: Path) -> tuple[FleetState, dict[str, tuple[str, ...]]]:
    """Every demo node ready with the facts its agent would report, and its inventory fabrics.

    Args:
        root: An empty folder for the capture directories.
    """
    nodes: dict[str, NodeState] = {}
    fabrics: dict[str, tuple[str, ...]] = {}
    for node in demo_nodes():
        options = {"hostname": node.name, **node.options}  # as the live demo writes them
        capture = write_profile(node.profile, root / node.name, **options)
        facts = parse_facts(collect_facts(replay=str(capture)), node.name)
        nodes[node.name] = NodeState(
            name=node.name, address="127.0.0.1", state="ready", facts=facts, last_seen=FROZEN_AT
        )
        fabrics[node.name] = (node.fabric,) if node.fabric else ()
    return FleetState(taken_at=FROZEN_AT, nodes=nodes), fabrics


def demo_replica(fleet_state: FleetState) -> ReplicaView:
    """A ready two-node vLLM replica on the demo's HGX H100 nodes, as their agents list it.

    The records are shaped as `shard.list` answers them and reassembled by
    `replica_view.assemble`, with fixed times and ports (no clocks in pictures).
    """
    at = FROZEN_AT.timestamp()
    placement = {
        "nodes": [
            {"node": "h100-a-01", "rank": 0, "gpus": [f"GPU-{i}" for i in range(8)]},
            {"node": "h100-a-02", "rank": 1, "gpus": [f"GPU-{i}" for i in range(8)]},
        ]
    }
    replica = {
        "name": "llama-405b",
        "model": "catalog:meta-llama/Meta-Llama-3.1-405B",
        "served_name": "meta-llama/Meta-Llama-3.1-405B",
        "engine": "vllm",
        "way": {"label": "2 × 8 × h100-80g"},
        "placement": placement,
        "fabric": "ib-a",
        "head": "h100-a-01",
        "http_port": 8000,
        "created_at": at - 30,
    }
    listings: dict[str, list[dict[str, object]]] = {
        str(entry["node"]): [
            {
                "shard_id": f"llama-405b-r{entry['rank']}",
                "replica": "llama-405b",
                "rank": entry["rank"],
                "gpus": entry["gpus"],
                "phase": "running",
                "healthy": entry["rank"] == 0,
                "started_at": at - 29,
                "spec": {"kind": SPEC_KIND, "replica": replica, "launch": {"argv": ["vllm"]}},
            }
        ]
        for entry in placement["nodes"]
    }
    (view,) = assemble(listings, fleet_state, now=FROZEN_AT)
    return view


def demo_logs(
    view: ReplicaView,
    *,
    socket_fallback: bool = True,
    topology: Mapping[str, Mapping[str, Mapping[str, str]]] | None = None,
) -> dict[str, list[str]]:
    """Each shard's log as the simulated engine writes it (NCCL INFO lines included).

    With `socket_fallback`, NCCL is told to leave InfiniBand alone, so it
    says `NET/Socket` — what the logs screen must shout about. `topology`:
    each node's card-to-card matrix, which the channel lines follow.
    """
    from llmgw_agent.sim.engine.lines import nccl_lines

    env = {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "=eth0"}
    env.update({"NCCL_IB_DISABLE": "1"} if socket_fallback else {"NCCL_IB_HCA": "=mlx5_0"})
    logs: dict[str, list[str]] = {}
    for shard in view.shards:
        engine = {
            "nnodes": len(view.shards),
            "tp": 8,
            "pp": len(view.shards),
            "node_rank": shard.rank,
        }
        logs[shard.shard_id] = [
            f"INFO vllm: starting rank {shard.rank} of {view.name} on {shard.node}",
            *nccl_lines(
                env,
                shard.node,
                4100 + shard.rank,
                engine,
                shard.gpus,
                {k: dict(v) for k, v in (topology or {}).get(shard.node, {}).items()},
            ),
            f"INFO vllm: rank {shard.rank} loaded its weights",
        ]
    return logs


def demo_replica_with_logs(fleet_state: FleetState) -> tuple[ReplicaView, dict[str, list[str]]]:
    """The demo replica with the NCCL transport its logs show attached, and those logs."""
    from dataclasses import replace

    from llmgw_core.fabric.verdicts import replica_transport
    from llmgw_core.serve.transport import node_topology, transport_dict

    view = demo_replica(fleet_state)
    topology = node_topology(fleet_state, fleet_state.nodes)
    logs = demo_logs(view, topology=topology)
    by_node = {s.shard_id: s.node for s in view.shards}
    transports, warnings = replica_transport(
        view.name,
        logs,
        [f"mlx5_{i}" for i in range(8)],
        len(view.shards),
        {shard_id: topology.get(node, {}) for shard_id, node in by_node.items()},
    )
    by_shard = {
        shard_id: transport_dict(found, topology.get(by_node[shard_id]), len(view.shards))
        for shard_id, found in transports.items()
    }
    return replace(view, transports=by_shard, transport_warnings=tuple(warnings)), logs


def demo_loads(name: str) -> ReplicaLoad:
    """The load a busy minute of the sim engine gives, read as the console reads it.

    The sim's own histograms (vLLM's names and bounds) take a fixed minute: a
    quiet start, then a queue building; the console's watch reads them every
    5 s, so the figures and the trend are the same in every picture.
    """
    from llmgw_agent.sim.engine.latency import Latencies
    from llmgw_core.serve.loads import LoadWatch

    latencies = Latencies("vllm")
    watch = LoadWatch()
    prompt = generated = 0
    load = None
    for step in range(13):
        queued = 0.0 if step < 5 else 0.15 * (step - 4)
        for _ in range(6):
            latencies.request(queued, 0.021, 48)
            prompt, generated = prompt + 212, generated + 48
        running, waiting = (4, 0) if step < 5 else (8, step - 4)
        text = (
            latencies.text(f'model_name="{name}"')
            + f"vllm:num_requests_running {running}\nvllm:num_requests_waiting {waiting}\n"
            + f"vllm:kv_cache_usage_perc {0.12 + 0.05 * step:.2f}\n"
            + f"vllm:prompt_tokens_total {prompt}\nvllm:generation_tokens_total {generated}\n"
        )
        load = watch.add(name, "vllm", text, at=5.0 * step)
    assert load is not None
    return load
