"""Replicas on the live fleet, read back from the nodes: list, logs, stop, reconcile.

Nothing is kept here between calls: `replicas_now` reassembles every replica
from the nodes' `shard.list` (`replica_view.assemble`), so a console started
later adopts what runs. `reconcile` stops what is left of a failed replica
so that no card stays claimed. Bringing one up is `replica_serve.serve`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from llmgw_agent.ops import Op
from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.fleet.client import AgentLost
from llmgw_core.planner.pools_live import LiveNode, live_nodes
from llmgw_core.serve.view import ReplicaView, assemble, superseded

NODE_GRACE_S = 60.0
"""How long a node may not answer before its replica is failed."""

REQUEST_TIMEOUT_S = 30.0


# --- reading the nodes ------------------------------------------------------------------


def _ready_names(fleet: Any) -> list[str]:
    return [node.name for node in fleet.snapshot().ready()]


async def shard_listings(fleet: Any) -> dict[str, list[dict[str, Any]]]:
    """Every ready node's `shard.list` (a node that fails to answer is left out)."""

    async def one(name: str) -> tuple[str, list[dict[str, Any]] | None]:
        try:
            answer = await fleet.request(name, Op.SHARD_LIST, timeout_s=REQUEST_TIMEOUT_S)
        except (LlmgwError, AgentLost):
            return name, None
        shards = answer.get("shards") if isinstance(answer, dict) else None
        return name, [s for s in shards or [] if isinstance(s, dict)]

    found = await asyncio.gather(*(one(name) for name in _ready_names(fleet)))
    listings = {name: shards for name, shards in found if shards is not None}
    return await _with_ended_jobs(fleet, listed_once(listings))


def listed_once(listings: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Each shard under one node only. Two nodes of the fleet may be one agent home: clusters
    whose entries share a login node reach it as `<cluster>-login` each, and each agent lists
    every shard of the home's state folder. A shard seen twice stays with the node its spec
    names (a gateway's `node`), else with the first node listing it; acting on it through
    the other would act twice (the second stop found nothing left to stop)."""
    homes: dict[tuple[Any, Any], list[str]] = {}
    for node, records in listings.items():
        for record in records:
            homes.setdefault((record.get("shard_id"), record.get("created_at")), []).append(node)
    kept: dict[str, list[dict[str, Any]]] = {}
    for node, records in listings.items():
        kept[node] = []
        for record in records:
            nodes = homes[(record.get("shard_id"), record.get("created_at"))]
            named = ((record.get("spec") or {}).get("gateway") or {}).get("node")
            owner = named if named in nodes else nodes[0]
            if node == owner:
                kept[node].append(record)
    return kept


async def _with_ended_jobs(
    fleet: Any, listings: dict[str, list[dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """A Slurm job's node whose job has ended answers no more, and its replica would vanish
    unexplained: its last listing stands in, every shard that ran failed with the
    scheduler's words (`job 12 on big ended: CANCELLED`), so the replica is failed with them
    and `keep` heals it. Nodes of running jobs have their listing kept for that."""
    kept = getattr(fleet, "job_listings", None)
    ended = getattr(fleet, "jobs_ended", None)
    if kept is None or ended is None:
        return listings
    for spec in fleet.inventory.node_specs():
        if spec.relay is None:
            continue
        if spec.name in listings:
            kept[spec.name] = listings[spec.name]
            continue
        if spec.name not in kept:
            continue
        if spec.name not in ended:
            # Not answering: ask the scheduler now rather than wait for the node's own retry.
            from llmgw_core.fleet.slurm_jobs import job_end_reason

            with contextlib.suppress(LlmgwError, OSError):
                said = await job_end_reason(fleet, spec)
                if said is not None:
                    ended[spec.name] = said
        if spec.name in ended:
            listings[spec.name] = [
                {**record, "phase": "failed", "reason": ended[spec.name], "healthy": False}
                if record.get("phase") in ("starting", "running")
                else record
                for record in kept[spec.name]
            ]
        else:
            # Not answering, and the job still runs: as on an SSH node, the replica stands
            # (judged by the node's state and grace) until the scheduler says.
            listings[spec.name] = kept[spec.name]
    return listings


async def node_claims(fleet: Any) -> dict[str, dict[str, str]]:
    """Per ready node, each claimed device id → the replica holding it."""

    async def one(name: str) -> tuple[str, dict[str, str]]:
        try:
            answer = await fleet.request(name, Op.CLAIMS, timeout_s=REQUEST_TIMEOUT_S)
        except (LlmgwError, AgentLost):
            return name, {}
        claims = answer.get("claims") if isinstance(answer, dict) else None
        return name, {
            str(c.get("gpu")): str(c.get("replica") or c.get("shard_id") or "another replica")
            for c in claims or []
            if isinstance(c, dict)
        }

    return dict(await asyncio.gather(*(one(name) for name in _ready_names(fleet))))


async def fleet_views(fleet: Any) -> tuple[LiveNode, ...]:
    """Every node as placement sees it now (claims read fresh from the agents)."""
    claims = await node_claims(fleet)
    # A Slurm cluster's login node runs an agent for leases and gateways, never a replica.
    specs = [spec for spec in fleet.inventory.node_specs() if spec.login_of is None]
    return live_nodes(fleet.snapshot(), specs, claims)


async def replicas_now(fleet: Any, *, grace_s: float = NODE_GRACE_S) -> tuple[ReplicaView, ...]:
    """Every replica the nodes run, reassembled from their shards now."""
    listings = await shard_listings(fleet)
    return assemble(listings, fleet.snapshot(), grace_s=grace_s)


async def find_replica(fleet: Any, name: str, *, grace_s: float = NODE_GRACE_S) -> ReplicaView:
    """The replica named `name`.

    Raises:
        BadInput: no replica has that name (naming those that run).
    """
    views = await replicas_now(fleet, grace_s=grace_s)
    for view in views:
        if view.name == name:
            return view
    names = ", ".join(v.name for v in views) or "none"
    raise BadInput(f"no replica is named {name!r}", f"the replicas are: {names}")


# --- stopping ---------------------------------------------------------------------------


async def stop_shard(fleet: Any, node: str, shard_id: str, *, forget: bool) -> None:
    with contextlib.suppress(LlmgwError, AgentLost):
        await fleet.request(
            node,
            Op.SHARD_STOP,
            {"shard_id": shard_id, "timeout_s": 10},
            timeout_s=REQUEST_TIMEOUT_S,
        )
    if forget:
        with contextlib.suppress(LlmgwError, AgentLost):
            await fleet.request(
                node, Op.SHARD_FORGET, {"shard_id": shard_id}, timeout_s=REQUEST_TIMEOUT_S
            )


async def stop_replica(fleet: Any, name: str) -> dict[str, Any]:
    """Stop every shard of `name` on the nodes that answer and forget them (frees every card)."""
    listings = await shard_listings(fleet)
    targets = [
        (node, str(record.get("shard_id")), [str(g) for g in record.get("gpus") or []])
        for node, records in listings.items()
        for record in records
        if record.get("replica") == name
    ]
    if not targets:
        views = assemble(listings, fleet.snapshot())
        names = ", ".join(v.name for v in views) or "none"
        raise BadInput(f"no replica is named {name!r}", f"the replicas are: {names}")
    await asyncio.gather(*(stop_shard(fleet, node, sid, forget=True) for node, sid, _ in targets))
    # A node that does not answer keeps its shard until it is back: `replicas` stops it then.
    placed: set[str] = set()
    jobs: set[tuple[str, str]] = set()
    for records in listings.values():
        for record in records:
            if record.get("replica") == name:
                spec = (record.get("spec") or {}).get("replica") or {}
                placed.update(n["node"] for n in spec.get("placement", {}).get("nodes", []))
                slurm = spec.get("slurm") or {}
                if slurm.get("cluster") and slurm.get("job_id"):
                    jobs.add((str(slurm["cluster"]), str(slurm["job_id"])))
    stopped: dict[str, Any] = {
        "name": name,
        "stopped": [{"node": node, "shard_id": sid, "gpus": gpus} for node, sid, gpus in targets],
        "unreached": sorted(placed - set(listings)),
    }
    if jobs:
        # On Slurm the job is the claim: stopping the replica gives its allocation back.
        from llmgw_core.fleet.slurm_jobs import cancel_replica_jobs

        stopped["slurm_jobs_cancelled"] = await cancel_replica_jobs(fleet, sorted(jobs))
        stopped["unreached"] = []  # the job's nodes went with it
    return stopped


async def reconcile(fleet: Any, *, grace_s: float = NODE_GRACE_S) -> tuple[ReplicaView, ...]:
    """Stop what still runs of every failed replica, then read the replicas again.

    A node lost fails its replica; the other ranks would wait forever on
    their next collective, holding their cards. A node back after its replica
    was placed again elsewhere still runs the old attempt's shard: it is
    stopped too. Their records are kept so their last lines can still be read.
    """
    listings = await shard_listings(fleet)
    views = assemble(listings, fleet.snapshot(), grace_s=grace_s)
    ready = set(_ready_names(fleet))
    targets = [
        (shard.node, shard.shard_id)
        for view in views
        if view.phase == "failed"
        for shard in view.live_shards()
        if shard.node in ready
    ]
    # A node back after its replica was placed again elsewhere: its old shard goes.
    targets += [(node, sid) for node, sid in superseded(listings) if node in ready]
    stops = [stop_shard(fleet, node, sid, forget=False) for node, sid in targets]
    if not stops:
        return views
    await asyncio.gather(*stops)
    return await replicas_now(fleet, grace_s=grace_s)


# --- logs -------------------------------------------------------------------------------


async def shard_lines(fleet: Any, node: str, shard_id: str, lines: int) -> list[str]:
    """The last `lines` lines of one shard's engine output."""
    lines_out: list[str] = []
    stream = fleet.client(node).stream(
        Op.SHARD_LOGS, {"shard_id": shard_id, "tail": lines, "follow": False}
    )
    async for event in stream:
        lines_out.extend(str(line) for line in event.get("lines") or [])
    return lines_out[-lines:]


async def replica_logs(
    fleet: Any, name: str, *, shard: str | None = None, lines: int = 200
) -> list[str]:
    """The last lines of every shard of a replica, each prefixed with its rank and node.

    Args:
        shard: one node name, rank (`1`) or shard id; None for every shard.
    """
    view = await find_replica(fleet, name)
    wanted = [
        s
        for s in view.shards
        if shard is None or shard in (s.node, s.shard_id, str(s.rank), f"r{s.rank}")
    ]
    if not wanted:
        raise BadInput(f"{name} has no shard {shard!r}", "give a node name, a rank or a shard id")
    merged: list[str] = []
    for found in wanted:
        try:
            text = await shard_lines(fleet, found.node, found.shard_id, lines)
        except (LlmgwError, AgentLost) as exc:
            text = [f"(its lines cannot be read: {exc})"]
        merged.extend(f"[r{found.rank} {found.node}] {line}" for line in text)
    return merged


__all__ = [
    "fleet_views",
    "reconcile",
    "replica_logs",
    "replicas_now",
    "stop_replica",
]
