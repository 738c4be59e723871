"""`serve` with `disaggregation:` and `dry_run: true`: every worker's commands, built as a start
would build them, nothing claimed or started.

Both sides are placed together (`placement_pd`), and each worker is a replica
of its side's way: its width (a side's `layout:` over the way's), the
connector's flags and the transfer's environment on the rails placement
found (`LaunchRequest.pd`), and its side's own batch shape from that way
(`planner.pd_shape`: its sequences and step). The ports shown are those free now. Workers that
share a node take their own handshake ports, past those of the workers
already there, whichever console started them (`place_split`, which a start
shares: `serve.disagg_start`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from llmgw_core.engines.disagg import (
    DEFAULT_BOOTSTRAP_PORT,
    DEFAULT_NIXL_SIDE_CHANNEL_PORT,
    ConnectorRule,
    connector_rule,
)
from llmgw_core.engines.spec import PdLaunch
from llmgw_core.errors import DoesNotFit
from llmgw_core.model.source import ModelInfo
from llmgw_core.placement import Placement
from llmgw_core.placement_pd import PdPlacement, PdRefused, PdWant, place_disaggregated
from llmgw_core.planner.pd_shape import SideShape, split_shapes
from llmgw_core.serve.choice import Choice
from llmgw_core.serve.disagg_args import DisaggregationArgs
from llmgw_core.serve.disagg_explain import side_choice, side_way, transfer_facts
from llmgw_core.serve.prepare import Resolved, ServeRequest, launch_for, resolve, shard_preview
from llmgw_core.serve.replicas import fleet_views, shard_listings


@dataclass(frozen=True)
class SplitWorker:
    """One worker of a disaggregated service, placed: its name, side, way, part and batch
    shape (None where the plan gives its side no way: the service's own shape then)."""

    name: str
    role: str
    choice: Choice
    placement: Placement
    pd: PdLaunch
    shape: SideShape | None = None

    def request(self, request: ServeRequest) -> ServeRequest:
        """The service's request as this worker starts (`with_shape`)."""
        return with_shape(request, self.shape, self.choice.engine)


def with_shape(request: ServeRequest, shape: SideShape | None, engine: str) -> ServeRequest:
    """The service's request as a worker of one side starts: its side's sequences and step
    budget, the operator's own `engine_args` winning where given (None: unchanged)."""
    if shape is None:
        return request
    return replace(
        request,
        concurrency=shape.max_seqs,
        engine_args={**shape.engine_args(engine), **request.engine_args},
    )


def side_request(
    request: ServeRequest,
    resolved: Resolved,
    choice: Choice,
    split: DisaggregationArgs,
    role: str,
    model_shape: Any | None = None,
) -> ServeRequest:
    """The request one more worker of `role` starts with after the split's start (a roll, a
    worker added by `keep`), shaped as the start shaped its side. A way whose side width the
    plan does not hold gives no shape: the start then refuses it as before, with its reason.
    `model_shape` counts what a longer vLLM prefill step takes from its KV (`split_shapes`)."""
    side = split.prefill if role == "prefill" else split.decode
    try:
        way = side_way(resolved.plan, choice, side, role)
    except DoesNotFit:
        return request
    shapes = split_shapes(
        choice.engine,
        {role: way},
        context=resolved.context,
        workload=split.workload,
        engine_args=dict(request.engine_args),
        model_shape=model_shape,
    )
    return with_shape(request, shapes.get(role), choice.engine)


@dataclass(frozen=True)
class SplitPlaced:
    """Both sides placed on one way: what a dry run shows and a start starts."""

    resolved: Resolved
    rule: ConnectorRule
    placed: PdPlacement
    workers: tuple[SplitWorker, ...]
    passed_over: tuple[dict[str, str], ...]


def next_handshake_ports(taken: dict[str, set[int]], nodes: list[str]) -> tuple[int, int]:
    """The first (bootstrap, side channel) pair free on every one of `nodes`, marked taken."""
    offset = 0
    while any(
        {DEFAULT_BOOTSTRAP_PORT + offset, DEFAULT_NIXL_SIDE_CHANNEL_PORT + offset}
        & taken.get(node, set())
        for node in nodes
    ):
        offset += 1
    ports = (DEFAULT_BOOTSTRAP_PORT + offset, DEFAULT_NIXL_SIDE_CHANNEL_PORT + offset)
    for node in nodes:
        taken.setdefault(node, set()).update(ports)
    return ports


def handshake_ports_taken(listings: Mapping[str, list[dict[str, Any]]]) -> dict[str, set[int]]:
    """Per node, the handshake ports the workers already there hold (any console's)."""
    taken: dict[str, set[int]] = {}
    for node, records in listings.items():
        for record in records:
            pd = ((record.get("spec") or {}).get("replica") or {}).get("pd")
            if isinstance(pd, Mapping) and record.get("phase") not in (
                "exited",
                "failed",
                "stopped",
            ):
                taken.setdefault(node, set()).update(
                    {int(pd.get("bootstrap_port") or 0), int(pd.get("side_channel_port") or 0)}
                )
    return taken


async def place_split(
    fleet: Any, request: ServeRequest, model: ModelInfo, split: DisaggregationArgs
) -> SplitPlaced:
    """Both sides placed on the first way that has room for them, each worker named and given
    its handshake ports: past those of every worker already on its nodes, whichever console
    started them, and one after the other where workers of this start share a node.

    Raises:
        BadInput: the engine, its connector or its release cannot split.
        DoesNotFit: no way fits, or none has room for both sides on one interconnect.
    """
    resolved = await resolve(fleet, request, model)
    views = await fleet_views(fleet)
    adapters, verdicts = transfer_facts(fleet)
    passed_over: list[dict[str, str]] = []
    for choice in resolved.ways:
        rule = connector_rule(choice.engine, split.connector)
        side_ways = {  # each side's width holds the model, and its way sizes its shape
            role: side_way(resolved.plan, choice, side, role)
            for role, side in (("prefill", split.prefill), ("decode", split.decode))
        }
        shapes = split_shapes(
            choice.engine,
            side_ways,
            context=resolved.context,
            workload=split.workload,
            engine_args=dict(request.engine_args),
            model_shape=model.any_shape,
        )
        sides = {
            "prefill": side_choice(choice, split.prefill),
            "decode": side_choice(choice, split.decode),
        }
        want = PdWant(
            sides["prefill"].want(resolved.models),
            sides["decode"].want(resolved.models),
            split.prefill.replicas if split.prefill else 1,
            split.decode.replicas if split.decode else 1,
            allow_tcp=split.allow_tcp,
        )
        placed = place_disaggregated(want, views, adapters, verdicts)
        if isinstance(placed, PdRefused):
            passed_over.append({"way": choice.label, "reason": placed.sentence(want)})
            continue
        taken = handshake_ports_taken(await shard_listings(fleet))
        workers = []
        for role, placements in (("prefill", placed.prefill), ("decode", placed.decode)):
            for index, placement in enumerate(placements, start=1):
                ports = next_handshake_ports(taken, [p.node for p in placement.nodes])
                pd = PdLaunch(
                    role,
                    rule.connector,
                    placed.transport,
                    rails=dict(placed.rails),
                    bootstrap_port=ports[0],
                    side_channel_port=ports[1],
                )
                workers.append(
                    SplitWorker(
                        f"{resolved.name}-{role}-{index}",
                        role,
                        sides[role],
                        placement,
                        pd,
                        shapes.get(role),
                    )
                )
        return SplitPlaced(resolved, rule, placed, tuple(workers), tuple(passed_over))
    raise DoesNotFit("; ".join(f"{p['way']}: {p['reason']}" for p in passed_over))


async def preview_disaggregated(
    fleet: Any, request: ServeRequest, model: ModelInfo, split: DisaggregationArgs
) -> dict[str, Any]:
    """Every worker of both sides as `serve` would start it, or why no way has room.

    `auto` without its ratio decided elsewhere previews one worker a side.

    Raises:
        BadInput: the engine, its connector or its release cannot split.
        DoesNotFit: no way fits, or none has room for both sides on one interconnect.
    """
    found = await place_split(fleet, request, model, split)
    resolved = found.resolved
    workers = []
    for worker in found.workers:
        launch, _ = await launch_for(
            fleet,
            worker.request(request),
            worker.choice,
            worker.placement,
            resolved.served_name,
            resolved.context,
            pd=worker.pd,
        )
        workers.append(
            {
                "name": worker.name,
                "role": worker.role,
                "way": worker.choice.label,
                "placement": worker.placement.as_dict(),
                "shape": worker.shape.as_dict() if worker.shape else None,
                "shards": list(shard_preview(launch)),
            }
        )
    return {
        "dry_run": True,
        "name": resolved.name,
        "model": request.model,
        "context": resolved.context,
        "connector": found.rule.engine_name,
        "disaggregation": found.placed.as_dict(),
        "workers": workers,
        "passed_over": list(found.passed_over),
        "warnings": list(found.placed.warnings)
        + (
            ["auto: one worker a side is shown; `explain` gives the advisor's ratio"]
            if split.auto
            else []
        ),
    }
