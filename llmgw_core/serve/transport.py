"""Which transport NCCL took on each shard of a replica, read from the shards' own logs.

A replica whose cards talk through host memory, or whose nodes fell back to
TCP sockets, runs — slowly — and nobody notices. Each shard's NCCL lines
(the agent's `shard.nccl`: NCCL's INFO and WARN lines from the start of its
log) are parsed by `fabric.replica_transport` into the path inside the node
(NVLink, PCIe P2P, host memory, MNNVL: `fabric.paths`, checked against the
node's topology) and the network between nodes (`IB`, `Socket`, a plugin,
GPUDirect RDMA, the adapters used). NVLink cards joined through host memory,
a multi-node replica on Socket, or an adapter outside the fabric, is warned.

NCCL says what it chose only with `NCCL_DEBUG=INFO` (or `TRACE`), which the
launcher sets unless the operator sets it otherwise; without it a shard's
transport is unknown, with the reason (`unknown_transport`), never guessed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from llmgw_agent.ops import Op
from llmgw_core.errors import LlmgwError
from llmgw_core.fabric.kv_transfer import (
    KvHandoffs,
    KvTransport,
    kv_warning,
    read_kv_handoffs,
    read_kv_transport,
)
from llmgw_core.fabric.kv_transfer import label as kv_label
from llmgw_core.fabric.nccl import NcclTransport
from llmgw_core.fabric.paths import NvlinkMatrix, inside_path, transport_label
from llmgw_core.fabric.verdicts import replica_transport
from llmgw_core.fleet.client import AgentError, AgentLost
from llmgw_core.fleet.state import FleetState
from llmgw_core.serve.view import ReplicaView, ShardView

NCCL_LINES = 400
"""How many of a shard's first NCCL lines are read: enough for every channel of 8 cards."""

KV_HANDOFF_LINES = 20
"""How many of a decode worker's last KV hand-off lines are read: the rate requests get now."""

TAIL_FALLBACK_LINES = 2000
"""From an agent without `shard.nccl`, the last lines read instead."""


def transport_dict(
    transport: NcclTransport, nvlink: NvlinkMatrix | None = None, node_count: int = 1
) -> dict[str, Any] | None:
    """One shard's transport as the `replicas` step gives it; None when NCCL said nothing.

    `label` names the path inside the node and, for a replica across nodes,
    the network between them (`NVLink + IB + GDR`); `inside` counts the rank
    pairs on each link (`transport_label`, `inside_path`).
    """
    if transport.network is None and transport.mnnvl is None and transport.version is None:
        return None
    inside = inside_path(transport, nvlink)
    return {
        "label": transport_label(transport, inside, node_count),
        "inside": (
            {"label": inside.label, "pairs": dict(inside.pairs)} if inside is not None else None
        ),
        "network": transport.network,
        "kind": transport.network_kind,
        "gpudirect": transport.gpudirect,
        "mnnvl": transport.mnnvl,
        "adapters": [f"{a.name}:{a.port}/{a.link_layer}" for a in transport.adapters],
        "socket_interfaces": list(transport.socket_interfaces),
        "nccl_version": transport.version,
        "nodes": transport.nodes,
    }


def unknown_transport(spec: Mapping[str, Any], phase: str) -> str:
    """Why a shard shows no transport, in a few words (for the table and the JSON)."""
    way = spec.get("way") or {}
    if spec.get("engine") == "llama.cpp":
        return "llama.cpp uses no NCCL"
    if way and way.get("gpu_class") is None and not way.get("cards_per_node"):
        return "a CPU node: no NCCL"  # vLLM's CPU ranks talk over Gloo
    if int(way.get("cards_per_node") or 0) * int(way.get("nodes") or 1) <= 1:
        return "one card: no NCCL"
    level = str((spec.get("env") or {}).get("NCCL_DEBUG", "INFO")).upper()
    if level not in ("INFO", "TRACE"):
        return f"NCCL_DEBUG={level}: NCCL does not say"
    if phase in ("starting", "loading"):
        return "not yet: NCCL speaks once the engine joins its cards"
    return "NCCL printed no channel lines"


def fabric_adapters(fleet: Any, view: ReplicaView) -> list[str] | None:
    """The adapters of the replica's fabric on its nodes (None: the replica uses no fabric)."""
    fabric = view.spec.get("fabric")
    if not fabric:
        return None
    nodes = {s.node for s in view.shards}
    found: list[str] = []
    for spec in fleet.inventory.node_specs():
        if spec.name not in nodes:
            continue
        for named in spec.fabrics:
            if named.name == fabric:
                found.extend(h for h in named.hcas if h not in found)
    return found


async def shard_nccl_lines(fleet: Any, shard: ShardView) -> list[str]:
    """One shard's NCCL lines, then its last KV hand-off lines (an older agent: its last
    lines, which may have lost them)."""
    try:
        answer = await fleet.request(
            shard.node,
            Op.SHARD_NCCL,
            {"shard_id": shard.shard_id, "limit": NCCL_LINES, "recent": KV_HANDOFF_LINES},
        )
        said = [*(answer.get("lines") or []), *(answer.get("recent") or [])]
        return [str(line) for line in said]
    except AgentError as exc:
        if exc.code != "unknown_op":
            raise
    from llmgw_core.serve.replicas import shard_lines

    return await shard_lines(fleet, shard.node, shard.shard_id, TAIL_FALLBACK_LINES)


async def with_transport(fleet: Any, view: ReplicaView) -> ReplicaView:
    """The replica with each shard's NCCL transport and its warnings attached.

    A shard whose node does not answer keeps no transport; a stopped
    replica is returned as it is.
    """
    if view.phase == "stopped" or not view.shards:
        return view

    async def read(shard: ShardView) -> tuple[ShardView, list[str] | None]:
        try:
            return shard, await shard_nccl_lines(fleet, shard)
        except (LlmgwError, AgentLost):
            return shard, None

    found = await asyncio.gather(*(read(s) for s in view.shards))
    logs = {shard.node: lines for shard, lines in found if lines is not None}
    node_count = len(view.spec.get("placement", {}).get("nodes", [])) or len(view.shards)
    topology = node_topology(fleet.snapshot(), logs)
    transports, warnings = replica_transport(
        view.name, logs, fabric_adapters(fleet, view), node_count, topology
    )
    by_shard: dict[str, Mapping[str, Any] | None] = {}
    for shard, lines in found:
        said = (
            transport_dict(transports[shard.node], topology.get(shard.node), node_count)
            if lines is not None
            else None
        )
        if said is None or said["label"] is None:
            said = {
                **(said or {}),
                "label": None,
                "unknown": unknown_transport(view.spec, view.phase),
            }
        kv = read_kv_transport(lines) if lines is not None else None
        if kv is not None:
            # A prefill or decode worker: its KV's path, beside NCCL's, and how fast the
            # requests a decode worker received lately got their KV.
            handoffs = read_kv_handoffs(lines or [])
            said = {**said, "kv": kv_dict(kv, handoffs)}
            warned = kv_warning(view.name, shard.node, kv, handoffs)
            warnings = [*warnings, warned] if warned else warnings
        by_shard[shard.shard_id] = said
    return dataclasses.replace(view, transports=by_shard, transport_warnings=tuple(warnings))


def kv_dict(transport: KvTransport, handoffs: KvHandoffs | None = None) -> dict[str, Any]:
    """A worker's KV path as the `replicas` step gives it; `per_request` the rate of a decode
    worker's last hand-offs (None for a prefill worker, or before any request)."""
    return {
        "label": kv_label(transport, handoffs),
        "kind": transport.kind,
        "devices": list(transport.devices),
        "connector": transport.connector,
        "role": transport.role,
        "per_request": (
            {
                "gbytes_per_s": handoffs.gbytes_per_s,
                "last_gbytes_per_s": handoffs.last_gbytes_per_s,
                "requests": handoffs.count,
                "bytes": handoffs.bytes_moved,
            }
            if handoffs is not None
            else None
        ),
    }


def node_topology(snapshot: FleetState, nodes: Iterable[str]) -> dict[str, NvlinkMatrix]:
    """Each named node's card-to-card matrix from its last facts (absent when unknown)."""
    found: dict[str, NvlinkMatrix] = {}
    for name in nodes:
        state = snapshot.nodes.get(name)
        if state is not None and state.facts is not None and state.facts.nvlink:
            found[name] = state.facts.nvlink
    return found


async def with_transports(fleet: Any, views: Sequence[ReplicaView]) -> tuple[ReplicaView, ...]:
    """`with_transport` for every replica, read at once."""
    return tuple(await asyncio.gather(*(with_transport(fleet, v) for v in views)))
