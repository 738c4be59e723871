"""`serve` with `disaggregation:` and `dry_run: true`: every worker's commands, built as a start
would build them, nothing claimed or started.

Both sides are placed together (`placement_pd`), and each worker is a replica
of its side's way: its width (a side's `layout:` over the way's), the
connector's flags and the transfer's environment on the rails placement
found (`LaunchRequest.pd`). The ports shown are those free now. Workers that
share a node are shown each with a port free now, and a start would choose
them one after the other. Starting the workers is not built yet
(docs/disaggregation.md).
"""

from __future__ import annotations

from typing import Any

from llmgw_core.engines.disagg import (
    DEFAULT_BOOTSTRAP_PORT,
    DEFAULT_NIXL_SIDE_CHANNEL_PORT,
    connector_rule,
)
from llmgw_core.engines.spec import PdLaunch
from llmgw_core.errors import DoesNotFit
from llmgw_core.model.source import ModelInfo
from llmgw_core.placement_pd import PdRefused, PdWant, place_disaggregated
from llmgw_core.serve.disagg_args import DisaggregationArgs
from llmgw_core.serve.disagg_explain import side_choice, side_way, transfer_facts
from llmgw_core.serve.prepare import ServeRequest, launch_for, resolve, shard_preview
from llmgw_core.serve.replicas import fleet_views


async def preview_disaggregated(
    fleet: Any, request: ServeRequest, model: ModelInfo, split: DisaggregationArgs
) -> dict[str, Any]:
    """Every worker of both sides as `serve` would start it, or why no way has room.

    `auto` without its ratio decided elsewhere previews one worker a side.

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
        for role, side in (("prefill", split.prefill), ("decode", split.decode)):
            side_way(resolved.plan, choice, side, role)  # each side's width holds the model
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
        workers = []
        on_node: dict[str, int] = {}
        for role, placements in (("prefill", placed.prefill), ("decode", placed.decode)):
            for index, placement in enumerate(placements, start=1):
                # Workers sharing a node each take their own handshake ports.
                nodes = [p.node for p in placement.nodes]
                offset = max(on_node.get(node, 0) for node in nodes)
                for node in nodes:
                    on_node[node] = offset + 1
                pd = PdLaunch(
                    role,
                    rule.connector,
                    placed.transport,
                    rails=dict(placed.rails),
                    bootstrap_port=DEFAULT_BOOTSTRAP_PORT + offset,
                    side_channel_port=DEFAULT_NIXL_SIDE_CHANNEL_PORT + offset,
                )
                launch, _ = await launch_for(
                    fleet,
                    request,
                    sides[role],
                    placement,
                    resolved.served_name,
                    resolved.context,
                    pd=pd,
                )
                workers.append(
                    {
                        "name": f"{resolved.name}-{role}-{index}",
                        "role": role,
                        "way": sides[role].label,
                        "placement": placement.as_dict(),
                        "shards": list(shard_preview(launch)),
                    }
                )
        return {
            "dry_run": True,
            "name": resolved.name,
            "model": request.model,
            "context": resolved.context,
            "connector": rule.engine_name,
            "disaggregation": placed.as_dict(),
            "workers": workers,
            "passed_over": passed_over,
            "warnings": list(placed.warnings)
            + (
                ["auto: one worker a side is shown; `explain` gives the advisor's ratio"]
                if split.auto
                else []
            ),
        }
    raise DoesNotFit("; ".join(f"{p['way']}: {p['reason']}" for p in passed_over))
