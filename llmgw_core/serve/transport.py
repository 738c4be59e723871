"""Which transport NCCL took on each shard of a replica, read from the shards' own logs.

A multi-node replica that fell back to TCP sockets runs — slowly — and
nobody notices. Each shard's NCCL lines (the agent's `shard.nccl`: NCCL's
INFO and WARN lines from the start of its log) are parsed by
`fabric.replica_transport` into the network (`IB`, `Socket`, a plugin),
GPUDirect RDMA, MNNVL and the adapters used; a replica whose multi-node
shards use Socket, or an adapter outside its fabric, gets a warning.

NCCL says what it chose only with `NCCL_DEBUG=INFO` (or `TRACE`): without
it a shard's transport is unknown (None), never guessed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from llmgw_core.errors import LlmgwError
from llmgw_core.fabric.nccl import NcclTransport
from llmgw_core.fabric.verdicts import replica_transport
from llmgw_core.fleet.client import AgentError, AgentLost
from llmgw_core.serve.view import ReplicaView, ShardView

NCCL_LINES = 400
"""How many of a shard's first NCCL lines are read: enough for every channel of 8 cards."""

TAIL_FALLBACK_LINES = 2000
"""From an agent without `shard.nccl`, the last lines read instead."""


def transport_dict(transport: NcclTransport) -> dict[str, Any] | None:
    """One shard's transport as the `replicas` step gives it; None when NCCL said nothing."""
    if transport.network is None and transport.mnnvl is None and transport.version is None:
        return None
    return {
        "label": transport.label,
        "network": transport.network,
        "kind": transport.network_kind,
        "gpudirect": transport.gpudirect,
        "mnnvl": transport.mnnvl,
        "adapters": [f"{a.name}:{a.port}/{a.link_layer}" for a in transport.adapters],
        "socket_interfaces": list(transport.socket_interfaces),
        "nccl_version": transport.version,
        "nodes": transport.nodes,
    }


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
    """One shard's NCCL lines (an older agent: its last lines, which may have lost them)."""
    try:
        answer = await fleet.request(
            shard.node, "shard.nccl", {"shard_id": shard.shard_id, "limit": NCCL_LINES}
        )
        return [str(line) for line in answer.get("lines") or []]
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
    transports, warnings = replica_transport(
        view.name, logs, fabric_adapters(fleet, view), node_count
    )
    by_shard = {
        shard.shard_id: transport_dict(transports[shard.node])
        for shard, lines in found
        if lines is not None
    }
    return dataclasses.replace(view, transports=by_shard, transport_warnings=tuple(warnings))


async def with_transports(fleet: Any, views: Sequence[ReplicaView]) -> tuple[ReplicaView, ...]:
    """`with_transport` for every replica, read at once."""
    return tuple(await asyncio.gather(*(with_transport(fleet, v) for v in views)))
