"""Making the fleet run what a service document says: `apply`, the roll, `stop` of a service.

Nothing is kept between runs: what runs is read from the agents (every
shard carries its service's label), compared with the document
(`service.spec.actions`), and changed under the service's lease
(`service.lease`), so two operators never change one service at once.

A replace rolls: the new replica starts on free cards and answers first,
joins every gateway, then the old one is marked draining (the gateways take
it out of rotation), finishes the requests it holds (read from its engine's
own `/metrics`, bounded by `drain_s`) and stops. A request sent through a
gateway during a roll is answered by one replica or the other. When the new
replica does not come up, it is stopped, the old one keeps serving, and
`apply` stops there, saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from llmgw_agent.ops import Op
from llmgw_core.engines.signals import in_flight
from llmgw_core.errors import BadInput, DoesNotFit, LlmgwError
from llmgw_core.fleet.client import AgentLost
from llmgw_core.gateway.run import follow_all, start_gateway
from llmgw_core.gateway.spec import gateway_views
from llmgw_core.serve.http import EngineReach
from llmgw_core.serve.loads import engine_key as _engine_key
from llmgw_core.serve.loads import engine_metrics
from llmgw_core.serve.replicas import replicas_now, shard_listings, stop_replica
from llmgw_core.serve.slurm import serve_where_asked
from llmgw_core.serve.start import ServeRequest
from llmgw_core.serve.view import ReplicaView, assemble
from llmgw_core.service.adapters import change_adapters, runtime_refusal, wanted_adapters
from llmgw_core.service.lease import LEASE_TTL_S, Held, service_lease
from llmgw_core.service.spec import (
    Action,
    ServiceDoc,
    actions,
    gateway_action,
    replica_names,
    running_of,
    service_label,
)

DRAIN_POLL_S = 0.25
DRAIN_SETTLE_S = 0.5
"""After a replica leaves the gateways, how long before its engine's count is believed: a
request the gateway routed just before may not have reached the engine yet."""

Progress = Callable[[str], None]


class ApplyFailed(LlmgwError):
    """A change did not happen; what was done before it stays done."""


def _quiet(_line: str) -> None:
    return None


async def planned_actions(
    fleet: Any, doc: ServiceDoc, adapters: tuple[tuple[str, str], ...] = ()
) -> tuple[Action, ...]:
    """What `apply` would do now: the replicas' changes, then the gateway's start.

    `adapters`: the document's LoRA adapters, (name, source as the nodes load it).
    """
    label = service_label(doc)
    listings = await shard_listings(fleet)  # read once: the replicas and the gateways
    replicas = assemble(listings, fleet.snapshot())
    found = running_of(replicas, doc.name)
    want = doc.wanted(sum(1 for r in found if not r.over))
    changes = actions(
        doc.name,
        want,
        label["settings"],
        label["hash"],
        found,
        [v.name for v in replicas],
        adapters,
    )
    running = [g.name for g in gateway_views(listings) if g.live]
    start = gateway_action(doc, running) if want > 0 else None
    return (*changes, *((start,) if start else ()))


async def apply_service(
    fleet: Any,
    reach: EngineReach,
    doc: ServiceDoc,
    base: ServeRequest,
    model: Any,
    *,
    dry_run: bool = False,
    progress: Progress = _quiet,
    holder: str | None = None,
    lease_ttl_s: float = LEASE_TTL_S,
) -> dict[str, Any]:
    """Compare the fleet with `doc`, say what changes, then (unless `dry_run`) change it.

    Args:
        base: the `ServeRequest` of one replica of the document (its name is set per replica).
        model: the model `base` names, resolved.

    Returns:
        `{service, actions, done, replicas, failed?}`: `actions` as planned
        (`[{action, replica, why, by?}]`), `done` each with its outcome and
        seconds, `replicas` the service's replicas afterwards.

    Raises:
        ServiceHeld: another operator holds the service's lease.
    """
    adapters = wanted_adapters(base)
    if dry_run:
        planned = await planned_actions(fleet, doc, adapters)
        return {
            "service": doc.name,
            "dry_run": True,
            "actions": [a.as_dict() for a in planned],
        }
    async with service_lease(fleet, doc.name, holder=holder, ttl_s=lease_ttl_s) as held:
        planned = await planned_actions(fleet, doc, adapters)  # read again under the lease
        for action in planned:
            progress(f"{doc.name}: {action.line()}")
        result: dict[str, Any] = {
            "service": doc.name,
            "actions": [a.as_dict() for a in planned],
            "done": [],
        }
        try:
            for action in planned:
                held.check()
                started = time.monotonic()
                detail = await carry_out(fleet, reach, doc, base, model, action, held, progress)
                seconds = round(time.monotonic() - started, 2)
                result["done"].append({**action.as_dict(), "seconds": seconds, **detail})
                progress(
                    f"{doc.name}: {action.action} {action.gateway or action.replica} done "
                    f"in {seconds:g} s"
                )
        except LlmgwError as exc:
            result["failed"] = exc.sentence()
            result["exit_code"] = exc.exit_code
        views = await replicas_now(fleet)
        result["replicas"] = [
            {"name": v.name, "phase": v.phase, "endpoint": v.endpoint}
            for v in views
            if v.service == doc.name
        ]
        return result


async def carry_out(
    fleet: Any,
    reach: EngineReach,
    doc: ServiceDoc,
    base: ServeRequest,
    model: Any,
    action: Action,
    held: Held,
    progress: Progress,
) -> dict[str, Any]:
    """Carry one action out: start (and wait until it answers), roll a replace, drain and stop.

    Returns:
        What is worth saying of it: the gateway's address, how a replica drained.

    Raises:
        DoesNotFit, ApplyFailed: the new replica did not come up (nothing of it is left).
    """
    if action.gateway is not None:
        assert doc.gateway_args is not None
        started = await start_gateway(fleet, reach, doc.gateway_args)
        return {"address": started.get("address")}
    if action.action == "adapt":
        found = next((v for v in await replicas_now(fleet) if v.name == action.replica), None)
        if found is None:
            raise ApplyFailed(f"{action.replica} is gone: its adapters cannot be changed")
        refused = runtime_refusal(found, base.lora)
        if refused is None:
            changed = await change_adapters(fleet, reach, found, base.lora, _engine_key(found))
            await follow_all(fleet, reach)
            return changed
        progress(f"{doc.name}: {action.replica}: {refused}; replacing it")
        taken = [v.name for v in await replicas_now(fleet)]
        (new_name,) = replica_names(doc.name, taken, 1)
        action = Action("replace", action.replica, refused, by=new_name)
    if action.action == "stop":
        # A replica that still answers leaves the gateways and finishes what it holds first.
        found = next((v for v in await replicas_now(fleet) if v.name == action.replica), None)
        stopped: dict[str, Any] = {}
        if found is not None and found.phase == "ready":
            stopped["drained"] = await drain(fleet, reach, found, doc.drain_s)
        await stop_replica(fleet, action.replica)
        await follow_all(fleet, reach)
        return stopped
    label = service_label(doc)
    new_name = action.by if action.action == "replace" else action.replica
    assert new_name is not None
    request = replace(base, name=new_name, service=label, wait_ready=True)
    await _start(
        fleet,
        reach,
        request,
        model,
        replacing=action.replica if action.action == "replace" else None,
    )
    await follow_all(fleet, reach)
    if action.action == "start":
        return {}
    held.check()
    progress(f"{doc.name}: {new_name} answers; draining {action.replica}")
    old = next((v for v in await replicas_now(fleet) if v.name == action.replica), None)
    drained: dict[str, Any] = {}
    if old is not None:
        drained = await drain(fleet, reach, old, doc.drain_s)
        await stop_replica(fleet, action.replica)
    await follow_all(fleet, reach)
    return {"drained": drained}


async def _start(
    fleet: Any, reach: EngineReach, request: ServeRequest, model: Any, *, replacing: str | None
) -> None:
    """Serve one replica of the service and wait until it answers.

    Raises:
        DoesNotFit: no free cards hold it (nothing was started; the old replica serves on).
        ApplyFailed: it did not come up (what started of it is stopped).
    """
    kept = f"; {replacing} still serves" if replacing else ""
    room = f"no free cards for {request.name}{' to replace ' + replacing if replacing else ''}"
    try:
        outcome = await serve_where_asked(fleet, reach, request, model)
    except DoesNotFit as exc:
        raise DoesNotFit(f"{room}: {exc.message}{kept}", exc.fix) from None
    if outcome.phase == "ready":
        return
    with contextlib.suppress(BadInput, LlmgwError, AgentLost):
        await stop_replica(fleet, str(request.name))
    if outcome.exit_code == DoesNotFit.exit_code:
        raise DoesNotFit(f"{room}: {outcome.reason}{kept}")
    raise ApplyFailed(f"{request.name} did not come up: {outcome.reason}{kept}")


async def drain(
    fleet: Any, reach: EngineReach, view: ReplicaView, drain_s: float
) -> dict[str, Any]:
    """Take `view` out of every gateway and wait until its engine holds no request (≤ `drain_s`).

    Returns:
        `{waited_s, in_flight}`: `in_flight` is what the engine still held when
        the wait ended (0 when drained; None when its engine publishes no
        count, and the whole `drain_s` was waited).
    """
    for shard in view.live_shards():
        with contextlib.suppress(LlmgwError, AgentLost):
            await fleet.request(shard.node, Op.SHARD_DRAIN, {"shard_id": shard.shard_id})
    await follow_all(fleet, reach)
    started = time.monotonic()
    await asyncio.sleep(min(DRAIN_SETTLE_S, drain_s))
    if view.phase != "ready":
        return {"waited_s": round(time.monotonic() - started, 2), "in_flight": 0}
    engine = str(view.spec.get("engine") or "")
    zeros, held = 0, None
    while True:
        text = await engine_metrics(reach, view)
        held = None if text is None else in_flight(text, engine)
        zeros = zeros + 1 if held == 0 else 0
        elapsed = time.monotonic() - started
        if zeros >= 2 or elapsed >= drain_s:
            break
        await asyncio.sleep(DRAIN_POLL_S)
    return {"waited_s": round(time.monotonic() - started, 2), "in_flight": held}


async def stop_service(
    fleet: Any, reach: EngineReach, name: str, *, holder: str | None = None
) -> dict[str, Any]:
    """Stop every replica of service `name` (under its lease) and forget them.

    Raises:
        BadInput: no replica of that service runs or ran here.
        ServiceHeld: another operator holds the service's lease.
    """
    async with service_lease(fleet, name, holder=holder):
        views = [v for v in await replicas_now(fleet) if v.service == name]
        if not views:
            services = sorted({v.service for v in await replicas_now(fleet) if v.service})
            raise BadInput(
                f"no replica of a service {name!r} runs here",
                f"the services are: {', '.join(services) or 'none'}",
            )
        stopped = []
        for view in sorted(views, key=lambda v: -v.created_at):
            stopped.append(await stop_replica(fleet, view.name))
        gateways = await follow_all(fleet, reach)
    return {
        "service": name,
        "stopped": [s["name"] for s in stopped],
        "unreached": sorted({n for s in stopped for n in s.get("unreached", [])}),
        **({"gateways": gateways} if gateways else {}),
    }
