"""Gathering one metrics snapshot from a live fleet (the I/O edge of `families`).

The fleet's snapshot is already in memory; replicas are reassembled from the
nodes' shard listings and gateways are scraped through SSH tunnels. A node
or gateway that does not answer is shown as such, never an exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from llmgw_agent.ops import Op
from llmgw_core.errors import LlmgwError
from llmgw_core.metrics.families import MetricsSnapshot
from llmgw_core.metrics.gateway import (
    GatewayTarget,
    gateway_targets,
    relabel,
    scrape_gateway,
)
from llmgw_core.serve.http import EngineReach
from llmgw_core.serve.replicas import shard_listings
from llmgw_core.serve.view import ReplicaView, assemble


async def scrape_all(
    reach: EngineReach, targets: Sequence[GatewayTarget]
) -> tuple[tuple[Any, ...], dict[tuple[str, str], bool], dict[str, str]]:
    """Every gateway's families relabelled, whether each answered, and why the others did not."""
    scrapes = await asyncio.gather(*(scrape_gateway(reach, target) for target in targets))
    families, failed = relabel(scrapes)
    up = {(s.target.name, s.target.node): s.target.name not in failed for s in scrapes}
    return families, up, failed


async def gather_snapshot(
    fleet: Any,
    reach: EngineReach,
    *,
    gateways: Sequence[GatewayTarget] = (),
    replicas: Sequence[ReplicaView] | None = None,
    refresh_facts: bool = False,
) -> tuple[MetricsSnapshot, dict[str, str]]:
    """The fleet now, its replicas, the given and discovered gateways' samples.

    Args:
        fleet: the live fleet (`snapshot()`, `request()`).
        reach: tunnels to the nodes' ports (the gateways').
        gateways: gateways to scrape beside those found in the nodes' shard listings.
        replicas: the replicas when the caller already has them (the console: it
            then lists nothing itself, and scrapes only `gateways`); else read now.
        refresh_facts: ask every ready node for its facts first (card memory and
            utilisation move; the fleet's snapshot holds them as last read).

    Returns:
        The snapshot, and per gateway that could not be read, why.
    """
    if refresh_facts:
        await fleet.refresh()
    found: tuple[GatewayTarget, ...] = ()
    if replicas is None:
        listings = await shard_listings(fleet)
        views = assemble(listings, fleet.snapshot())
        found = gateway_targets(listings)
    else:
        views = tuple(replicas)
    targets = list(dict.fromkeys([*gateways, *found]))
    families, up, failed = await scrape_all(reach, targets)
    snapshot = MetricsSnapshot(
        fleet=fleet.snapshot(),
        replicas=views,
        gateways=families,
        gateway_up=up,
        scale_events=await scale_events(fleet),
    )
    return snapshot, failed


async def scale_events(fleet: Any) -> dict[str, dict[str, int]]:
    """Every service's scale events, as the agent keeping the leases counts them ({} when it
    does not answer, or is an agent that does not count them)."""
    from llmgw_core.fleet.client import AgentLost
    from llmgw_core.service.lease import lease_node

    try:
        answer = await fleet.request(lease_node(fleet), Op.SERVICE_COUNTS, timeout_s=10)
    except (LlmgwError, AgentLost):
        return {}
    counts = answer.get("counts") if isinstance(answer, dict) else None
    if not isinstance(counts, dict):
        return {}
    return {
        str(name): {d: n for d, n in by.items() if isinstance(n, int) and d in ("out", "in")}
        for name, by in counts.items()
        if isinstance(by, dict)
    }
