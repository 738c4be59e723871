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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from llmgw_agent.ops import Op
from llmgw_core.engines.signals import in_flight
from llmgw_core.errors import BadInput, DoesNotFit, LlmgwError
from llmgw_core.fleet.client import AgentLost
from llmgw_core.gateway.run import follow_all, start_gateway
from llmgw_core.gateway.spec import gateway_views
from llmgw_core.serve.disagg_explain import side_choice
from llmgw_core.serve.disagg_preview import side_request
from llmgw_core.serve.disagg_start import serve_disaggregated, start_worker
from llmgw_core.serve.http import EngineReach
from llmgw_core.serve.loads import engine_key as _engine_key
from llmgw_core.serve.loads import engine_metrics
from llmgw_core.serve.prepare import resolve
from llmgw_core.serve.replicas import replicas_now, shard_listings, stop_replica
from llmgw_core.serve.slurm import serve_where_asked
from llmgw_core.serve.start import ServeRequest
from llmgw_core.serve.view import ReplicaView, assemble
from llmgw_core.service.adapters import change_adapters, runtime_refusal, wanted_adapters
from llmgw_core.service.lease import LEASE_TTL_S, Held, service_lease
from llmgw_core.service.spec import (
    Action,
    Running,
    ServiceDoc,
    actions,
    gateway_action,
    replica_names,
    running_of,
    service_label,
    side_label,
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
    if doc.disaggregation is not None:
        changes = split_actions(doc, found, label, [v.name for v in replicas])
        want = 1
    else:
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


def split_actions(
    doc: ServiceDoc,
    found: Sequence[Running],
    label: Mapping[str, Any],
    taken: Sequence[str],
    wants: Mapping[str, int] | None = None,
) -> tuple[Action, ...]:
    """What makes a disaggregated service's workers the document's: each side's own changes
    (its workers named `NAME-prefill-1` …), or, while no worker of it runs, one start of
    both sides together (placed on one interconnect, `serve.disagg_start`).

    `wants`: each side's count where `keep` holds one other than the document's."""
    split = doc.disaggregation
    assert split is not None
    over = [Action("stop", r.name, f"it {r.phase}") for r in found if r.over]
    if not any(not r.over for r in found):
        sides = (
            f"{split.prefill.replicas if split.prefill else 1} prefill and "
            f"{split.decode.replicas if split.decode else 1} decode workers"
        )
        return (*over, Action("start", doc.name, f"the split wants {sides}; none run"))
    done: list[Action] = []
    for role, side in (("prefill", split.prefill), ("decode", split.decode)):
        own = side_label(label, role)
        done += actions(
            f"{doc.name}-{role}",
            (wants or {}).get(role, side.replicas if side else 1),
            own["settings"],
            own["hash"],
            [r for r in found if r.role == role],
            taken,
        )
    return tuple(done)


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
    if doc.disaggregation is not None and action.replica == doc.name:
        request = replace(base, name=doc.name, service=label, wait_ready=True)
        await _start_split(fleet, reach, request, model, doc)
        await follow_all(fleet, reach)
        return {}
    new_name = action.by if action.action == "replace" else action.replica
    assert new_name is not None
    request = replace(base, name=new_name, service=label, wait_ready=True)
    replacing = action.replica if action.action == "replace" else None
    if doc.disaggregation is not None:
        role = new_name.removeprefix(f"{doc.name}-").split("-")[0]
        request = replace(request, service=side_label(label, role))
        await _start_worker(fleet, reach, request, model, doc, role, replacing=replacing)
    else:
        await _start(fleet, reach, request, model, replacing=replacing)
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


async def _start_split(
    fleet: Any, reach: EngineReach, request: ServeRequest, model: Any, doc: ServiceDoc
) -> None:
    """Start both sides of a disaggregated service and wait until every worker answers.

    Raises:
        DoesNotFit: no interconnect has room for both sides (nothing was started).
        ApplyFailed: a worker did not come up (every worker of the start is stopped).
    """
    assert doc.disaggregation is not None
    label = service_label(doc)
    started = await serve_disaggregated(
        fleet, reach, request, model, doc.disaggregation, lambda role: side_label(label, role)
    )
    if started["phase"] == "failed":
        if started.get("exit_code") == DoesNotFit.exit_code:
            raise DoesNotFit(str(started["reason"]))
        raise ApplyFailed(str(started["reason"]))


async def _start_worker(
    fleet: Any,
    reach: EngineReach,
    request: ServeRequest,
    model: Any,
    doc: ServiceDoc,
    role: str,
    *,
    replacing: str | None,
) -> None:
    """One worker of a running split (`NAME-decode-3`), on the side and the KV's path of the
    worker it replaces (or, added to a side, of a worker running there), and wait until it
    answers.

    Raises:
        DoesNotFit: no free cards on that path hold it (the old worker serves on).
        ApplyFailed: it did not come up (what started of it is stopped).
    """
    split = doc.disaggregation
    assert split is not None and request.name is not None
    views = [v for v in await replicas_now(fleet) if v.service == doc.name and v.role]
    template = next((v for v in views if v.name == replacing), None) or next(
        (v for v in sorted(views, key=lambda v: -v.created_at) if v.role == role), None
    )
    kept = f"; {replacing} still serves" if replacing else ""
    if template is None:
        raise ApplyFailed(f"no {role} worker of {doc.name} runs to start {request.name} beside")
    resolved = await resolve(fleet, request, model)
    side = split.prefill if role == "prefill" else split.decode
    record: dict[str, Any] = {"outcome": "no room", "reason": "no way of the plan fits"}
    for choice in resolved.ways:
        shaped = side_request(request, resolved, choice, split, role, model.any_shape)
        record = await start_worker(
            fleet, reach, shaped, side_choice(choice, side), resolved, request.name, template
        )
        if record["outcome"] != "no room":
            break
    if record["outcome"] == "ready":
        return
    if record["outcome"] == "no room":
        raise DoesNotFit(f"{record['reason']}{kept}")
    with contextlib.suppress(BadInput, LlmgwError, AgentLost):
        await stop_replica(fleet, request.name)
    raise ApplyFailed(f"{request.name} did not come up: {record['reason']}{kept}")


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
