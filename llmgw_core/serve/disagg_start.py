"""Starting a disaggregated service: both sides placed together, each worker a replica.

A worker is an ordinary replica in every way the fleet sees: its cards are
claimed by the agents' `shard.start`, its shards carry its spec, `replicas`
reassembles it, `stop` ends it. What makes it a worker is its part of the
split (`PdLaunch`), recorded in its spec as `pd` (`PdLaunch.recorded`), so
every console, the gateway and a heal know its side. The workers of one
split carry one service label (the service's, or for a plain `serve` one
named after it), so `stop: {service}` ends both sides.

The placement of both sides comes first and is fixed for the start
(`disagg_preview.place_split`, the dry run's own): a worker that loses a
race for its cards to another console stops the whole start, and both sides
are placed again on what is left, so the sides never end up on two
interconnects. A worker that does not come up stops every worker of this
start: a split with one side missing serves nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from llmgw_core.engines.spec import PdLaunch
from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.fleet.client import AgentLost
from llmgw_core.model.source import ModelInfo
from llmgw_core.placement import DOMAIN, explain, interconnect_groups, place, want_summary
from llmgw_core.placement_pd import TCP
from llmgw_core.planner.pools_live import LiveNode
from llmgw_core.serve.choice import Choice
from llmgw_core.serve.disagg_args import DisaggregationArgs
from llmgw_core.serve.disagg_preview import (
    SplitPlaced,
    handshake_ports_taken,
    next_handshake_ports,
    place_split,
)
from llmgw_core.serve.http import EngineReach
from llmgw_core.serve.prepare import Resolved, ServeRequest
from llmgw_core.serve.replicas import fleet_views, shard_listings, stop_replica
from llmgw_core.serve.start import RACE_RETRIES, ServeOutcome, serve_way
from llmgw_core.serve.view import ReplicaView


async def _stop_all(fleet: Any, names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(BadInput, LlmgwError, AgentLost):
            await stop_replica(fleet, name)


async def serve_disaggregated(
    fleet: Any,
    reach: EngineReach,
    request: ServeRequest,
    model: ModelInfo,
    split: DisaggregationArgs,
    labels: Callable[[str], Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Start every worker of both sides and wait until each answers (`request.wait_ready`).

    `labels` gives the service label a worker of each side records (a service's own per
    side, `service.spec.side_label`); by default both record one named after the split.

    Returns:
        `{name, phase: ready | starting | failed, reason, connector, disaggregation,
        workers: [{name, role, phase, placement, reason}], warnings, exit_code?}`.

    Raises:
        BadInput: the engine, its connector or its release cannot split.
        DoesNotFit: no way fits, or none has room for both sides on one interconnect.
    """
    found: SplitPlaced | None = None
    for _race in range(RACE_RETRIES):
        found = await place_split(fleet, request, model, split)
        resolved = found.resolved
        names = [w.name for w in found.workers]
        listings = await shard_listings(fleet)
        ended = {r.get("replica") for records in listings.values() for r in records}
        for name in names:
            if name in ended:  # the records of an old, ended worker of that name
                await stop_replica(fleet, name)
        outcomes = [ServeOutcome(name=w.name, phase="failed") for w in found.workers]
        records = await asyncio.gather(
            *(
                serve_way(
                    fleet,
                    reach,
                    replace(
                        worker.request(request),
                        name=worker.name,
                        service=labels(worker.role) if labels else {"name": resolved.name},
                    ),
                    worker.choice,
                    worker.name,
                    resolved.served_name,
                    resolved.models,
                    resolved.context,
                    1,
                    outcome,
                    placed=worker.placement,
                    pd=worker.pd,
                )
                for worker, outcome in zip(found.workers, outcomes, strict=True)
            )
        )
        workers = [
            {
                "name": worker.name,
                "role": worker.role,
                "phase": {"ready": "ready", "started": "starting"}.get(record["outcome"], "failed"),
                "placement": worker.placement.as_dict(),
                "reason": record.get("reason"),
            }
            for worker, record in zip(found.workers, records, strict=True)
        ]
        result: dict[str, Any] = {
            "name": resolved.name,
            "model": request.model,
            "connector": found.rule.engine_name,
            "disaggregation": found.placed.as_dict(),
            "workers": workers,
            "warnings": list(found.placed.warnings),
        }
        if any(r["outcome"] == "busy" for r in records):
            await _stop_all(fleet, [w["name"] for w in workers if w["phase"] != "failed"])
            continue
        failed = [w for w in workers if w["phase"] == "failed"]
        if failed:
            await _stop_all(fleet, names)
            first = failed[0]
            return {
                **result,
                "phase": "failed",
                "reason": f"{first['name']} did not come up: {first['reason']}; "
                "every worker of the split was stopped",
                "exit_code": next(
                    (r.get("exit_code", 1) for r in records if r["outcome"] != "ready"), 1
                ),
            }
        phase = "ready" if all(w["phase"] == "ready" for w in workers) else "starting"
        return {**result, "phase": phase, "reason": None}
    return {
        "name": found.resolved.name if found else request.name,
        "phase": "failed",
        "reason": f"lost the race for cards {RACE_RETRIES} times: other consoles keep taking them",
        "workers": [],
        "exit_code": 1,
    }


def worker_nodes(views: Sequence[LiveNode], pd: PdLaunch, near: Sequence[str]) -> list[LiveNode]:
    """The nodes a worker started after its split (a roll, a heal) may go to: where its KV
    still reaches the other side by the path recorded at the split's start.

    Inside an NVLink domain, any node of the domain `near` (the nodes the split
    used) is in; on a fabric, the nodes the split's rails were chosen for (a
    node new to the service has no rail tested against the others); on one
    node, that node; over TCP, any.
    """
    if pd.transport == TCP:
        return list(views)
    if pd.transport == "nvlink":
        for kind, _name, members in interconnect_groups(views):
            if kind == DOMAIN and any(v.name in near for v in members):
                return members
        return []
    allowed = set(pd.rails) if pd.transport in ("infiniband", "roce") else set(near)
    return [v for v in views if v.name in allowed]


async def start_worker(
    fleet: Any,
    reach: EngineReach,
    request: ServeRequest,
    choice: Choice,
    resolved: Resolved,
    name: str,
    template: ReplicaView,
    heals: int = 0,
) -> dict[str, Any]:
    """One more worker of a running split, on the side and path of `template` (the worker it
    replaces, heals or joins), placed on `worker_nodes` with handshake ports of its own.

    Returns:
        `serve_way`'s record (`outcome`: ready, started, failed, no room).
    """
    pd = PdLaunch.of_record(template.spec["pd"])
    near = [str(n.get("node")) for n in template.spec.get("placement", {}).get("nodes") or []]
    outcome = ServeOutcome(name=name, phase="failed")
    record: dict[str, Any] = {"outcome": "failed", "reason": "no try"}
    for _race in range(RACE_RETRIES):
        views = worker_nodes(await fleet_views(fleet), pd, near)
        want = choice.want(resolved.models)
        placement = place(want, views)
        if placement is None:
            reasons = want_summary(explain(want, views))
            return {
                "outcome": "no room",
                "reason": f"no room for {name}: {reasons}",
                "exit_code": 3,
            }
        taken = handshake_ports_taken(await shard_listings(fleet))
        ports = next_handshake_ports(taken, [p.node for p in placement.nodes])
        record = await serve_way(
            fleet,
            reach,
            replace(request, name=name),
            choice,
            name,
            resolved.served_name,
            resolved.models,
            resolved.context,
            int(template.spec.get("attempt") or 1) + 1 if heals else 1,
            outcome,
            heals,
            placed=placement,
            pd=replace(pd, bootstrap_port=ports[0], side_channel_port=ports[1]),
        )
        if record["outcome"] != "busy":
            return {**record, "placement": outcome.placement, "trace": outcome.trace.steps}
    return record
