"""`keep`: a service healed and scaled on its engines' own signals, for as long as it runs.

Every `interval_s` the keeper, holding the service's lease the whole time:

1. reads the service's replicas from the agents and makes them what the
   document says (`spec.actions` with the count it keeps): a replica whose
   engine died or whose node was lost is replaced (**heal**), through the
   same start, drain and stop as `apply`;
2. reads each ready replica's load from its engine's `/metrics` (requests
   running and waiting, KV cache in use: `engines.signals`) and lets the
   `Scaler` decide: **scale out** by one replica (placed by the planner on
   free cards, as `serve` places it) or **scale in** by one (the newest,
   drained first).

When no free cards hold one more replica the keeper says so once, with the
planner's reason, and does not try again until the cards the agents hold
change. Every action is an event `{at, action, replica, why}`, printed as
it happens and returned when the keeper ends. When it ends (its duration
spent, interrupted, killed) the service keeps running as it is; nothing
heals until a keeper runs again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from llmgw_agent.ops import Op
from llmgw_core.engines.latency import combined
from llmgw_core.errors import DoesNotFit, LlmgwError
from llmgw_core.fleet.client import AgentLost
from llmgw_core.gateway.run import queued_at_fronts
from llmgw_core.gateway.spec import GatewayView, gateway_views
from llmgw_core.serve.http import EngineReach
from llmgw_core.serve.loads import LoadWatch, engine_metrics
from llmgw_core.serve.replicas import node_claims, replicas_now, shard_listings
from llmgw_core.serve.start import ServeRequest
from llmgw_core.serve.view import ReplicaView, assemble
from llmgw_core.service.apply import ApplyFailed, carry_out, split_actions
from llmgw_core.service.lease import LEASE_TTL_S, Held, lease_node, service_lease
from llmgw_core.service.scale import Decision, Reading, Scaler
from llmgw_core.service.spec import (
    Action,
    Running,
    ServiceDoc,
    actions,
    running_of,
    service_label,
    side_label,
)

KEEP_INTERVAL_S = 2.0

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Event:
    """One thing the keeper did (or could not do), and why."""

    at: str
    action: str
    replica: str
    why: str

    def as_dict(self) -> dict[str, str]:
        return {"at": self.at, "action": self.action, "replica": self.replica, "why": self.why}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class _Side:
    """One side of a split kept: its scaler, the count it keeps, its engines' reads."""

    scaler: Scaler | None
    want: int | None = None
    watch: LoadWatch = field(default_factory=LoadWatch)


def _side_of(service: str, action: Action) -> str:
    """`prefill` or `decode` from a worker's name (`chat-pd-decode-3`); "" for the whole split."""
    return (action.by or action.replica).removeprefix(f"{service}-").split("-")[0]


class Keeper:
    """One service kept: its count, its scaler, what it said, what it is blocked on."""

    def __init__(
        self,
        fleet: Any,
        reach: EngineReach,
        doc: ServiceDoc,
        base: ServeRequest,
        model: Any,
        *,
        progress: Progress,
    ) -> None:
        self.fleet, self.reach, self.doc = fleet, reach, doc
        self.base, self.model, self.progress = base, model, progress
        self.label = service_label(doc)
        self.scaler = Scaler(doc.bounds) if doc.bounds is not None else None
        self.want: int | None = None
        self.events: list[Event] = []
        self.blocked_on: tuple[tuple[str, str], ...] | None = None
        """The cards held when the last start found no room: no new try until they change."""
        self.cycles = 0
        self.cycle_s: list[float] = []
        self.unread = 0
        """Cycles in which no ready replica's engine could be read (its signals unknown)."""
        self.watch = LoadWatch()
        """Each replica's engine's reads of the last minute (its latency), by replica."""
        self.sides: dict[str, _Side] = {}
        """A split's sides, each kept on its own (`_split_todo`)."""

    def say(self, action: str, replica: str, why: str) -> None:
        event = Event(_now(), action, replica, why)
        self.events.append(event)
        self.progress(f"{self.doc.name}: {action} {replica}: {why}")

    async def _claims(self) -> tuple[tuple[str, str], ...]:
        claims = await node_claims(self.fleet)
        return tuple(sorted((node, gpu) for node, held in claims.items() for gpu in held))

    async def cycle(self, held: Held) -> None:
        """One look at the service and the changes it calls for."""
        started = time.monotonic()
        held.check()
        listings = await shard_listings(self.fleet)
        views = assemble(listings, self.fleet.snapshot())
        found = running_of(views, self.doc.name)
        mine = [v for v in views if v.service == self.doc.name]
        todo: list[tuple[Action, Decision | None]]
        if self.doc.disaggregation is not None:
            todo = await self._split_todo(found, views, mine, gateway_views(listings))
        else:
            todo = await self._todo(found, views, mine, gateway_views(listings))
        failed = {r.name: r for r in found if r.over}
        for action, decided in todo:
            held.check()
            await self._carry(action, decided, failed, held)
        gateway = self.doc.gateway_args
        running = {g.name for g in gateway_views(listings) if g.live}
        if (
            gateway is not None
            and gateway.name not in running
            and any(v.phase == "ready" for v in mine)
        ):
            start = Action(
                "start",
                "",
                "the service puts its replicas behind it and it does not run",
                gateway=gateway.name,
            )
            self.say("start", f"gateway {gateway.name}", start.why)
            try:
                await self._carry_out(start, held)
            except LlmgwError as exc:
                self.say("failed", f"gateway {gateway.name}", exc.sentence())
        self.cycles += 1
        self.cycle_s.append(time.monotonic() - started)

    async def _todo(
        self,
        found: Sequence[Running],
        views: Sequence[ReplicaView],
        mine: list[ReplicaView],
        gateways: Sequence[GatewayView],
    ) -> list[tuple[Action, Decision | None]]:
        """The replicas' changes this cycle, each with the scaling decision behind it."""
        live = [r for r in found if not r.over]
        if self.want is None:
            self.want = self.doc.wanted(len(live))
        decision = None
        if self.scaler is not None:
            current = [r for r in live if r.hash == self.label["hash"]]
            reading = await self.reading(mine, gateways)
            if reading.ready == 0 and any(v.phase == "ready" for v in mine):
                self.unread += 1
            decision = self.scaler.step(time.monotonic(), reading, len(current))
            if decision is not None:
                self.want += 1 if decision.direction == "out" else -1
                # The latencies start anew: the next step rests on requests that ended
                # with the new count, not on the minute that called for this one.
                self.watch = LoadWatch()
        changes = actions(
            self.doc.name,
            self.want,
            self.label["settings"],
            self.label["hash"],
            found,
            [v.name for v in views],
        )
        return [(action, decision) for action in changes]

    async def _split_todo(
        self,
        found: Sequence[Running],
        views: Sequence[ReplicaView],
        mine: list[ReplicaView],
        gateways: Sequence[GatewayView],
    ) -> list[tuple[Action, Decision | None]]:
        """A split's changes this cycle: each side kept at its own count, scaled on its own
        signals (prefill: prompts waiting, time to first token; decode: KV cache in use, time
        between tokens), each change with the decision behind it."""
        split = self.doc.disaggregation
        assert split is not None
        decisions: dict[str, Decision | None] = {}
        for role, side in (("prefill", split.prefill), ("decode", split.decode)):
            kept = self.sides.setdefault(
                role, _Side(Scaler(side.scale) if side and side.scale else None)
            )
            live = [r for r in found if r.role == role and not r.over]
            if kept.want is None:
                count = len(live) or (side.replicas if side else 1)
                bounds = side.scale if side else None
                kept.want = max(bounds.min, min(bounds.max, count)) if bounds else count
            decisions[role] = None
            if kept.scaler is None or not live:
                continue
            own = side_label(self.label, role)
            current = [r for r in live if r.hash == own["hash"]]
            workers = [v for v in mine if v.role == role]
            # Requests held at a gateway wait for a prefill worker first.
            reading = await self.reading(workers, gateways if role == "prefill" else (), kept.watch)
            decision = kept.scaler.step(time.monotonic(), reading, len(current))
            if decision is not None:
                kept.want += 1 if decision.direction == "out" else -1
                kept.watch = LoadWatch()
                decisions[role] = decision
        wants = {role: kept.want for role, kept in self.sides.items() if kept.want is not None}
        changes = split_actions(self.doc, found, self.label, [v.name for v in views], wants)
        return [(a, decisions.get(_side_of(self.doc.name, a))) for a in changes]

    def _give_up_one(self, action: Action) -> None:
        """A scale-out that found no room is given up: the count (the side's) goes back."""
        side = self.sides.get(_side_of(self.doc.name, action))
        if self.doc.disaggregation is not None and side is not None:
            side.want = max(0, (side.want or 0) - 1)
        else:
            self.want = max(0, (self.want or 0) - 1)

    async def _carry(
        self, action: Action, decision: Decision | None, failed: dict[str, Any], held: Held
    ) -> None:
        name = action.by or action.replica
        scaling_out = decision is not None and decision.direction == "out"
        if action.action == "start" and self.blocked_on is not None:
            if await self._claims() == self.blocked_on:
                if scaling_out:
                    self._give_up_one(action)
                return  # said once already; the cards have not changed
            self.blocked_on = None
        if action.replica in failed:
            self.say("heal", action.replica, action.why)
        elif decision is not None and action.action in ("start", "stop"):
            self.say(f"scale-{decision.direction}", name, decision.why)
        else:
            self.say(action.action, name, action.why)
        try:
            await self._carry_out(action, held)
        except DoesNotFit as exc:
            if scaling_out:
                self._give_up_one(action)
            self.blocked_on = await self._claims()
            would = await self.what_would_fit()
            self.say("blocked", name, exc.sentence() + (f"; {would}" if would else ""))
        except ApplyFailed as exc:
            self.say("failed", name, exc.sentence())
        else:
            if decision is not None and action.action in ("start", "stop"):
                await self._count(decision.direction)

    async def _carry_out(self, action: Action, held: Held) -> dict[str, Any]:
        return await carry_out(
            self.fleet, self.reach, self.doc, self.base, self.model, action, held, self.progress
        )

    async def _count(self, direction: str) -> None:
        """Count a scale event where the metrics read it (the agent keeping the leases)."""
        with contextlib.suppress(LlmgwError, AgentLost):
            await self.fleet.request(
                lease_node(self.fleet),
                Op.SERVICE_COUNT,
                {"name": self.doc.name, "direction": direction},
                timeout_s=10,
            )

    async def what_would_fit(self) -> str | None:
        """What the planner would place now if the document fixed no layout (None: nothing)."""
        from llmgw_core.serve.choice import Overrides
        from llmgw_core.serve.prepare import preview_serve

        probe = replace(
            self.base, name=f"{self.doc.name}-probe", overrides=Overrides(), fallbacks=16
        )
        try:
            preview = await preview_serve(self.fleet, probe, self.model)
        except LlmgwError:
            return None
        if preview.way is None:
            return None
        nodes = [n["node"] for n in (preview.placement or {}).get("nodes", [])]
        return (
            f"without the layout it fixes, {preview.way['label']} would fit now on "
            f"{', '.join(nodes)}"
        )

    async def reading(
        self,
        mine: list[ReplicaView],
        gateways: Sequence[GatewayView] = (),
        watch: LoadWatch | None = None,
    ) -> Reading:
        """The service's load now: its ready replicas' engines read side by side, and the
        requests for them waiting at a gateway's front that keeps fair shares (held there,
        they are waiting requests the engines do not count)."""
        ready = [v for v in mine if v.phase == "ready" and not v.draining]
        models = {str(v.spec.get("served_name") or v.name) for v in ready}
        texts, queued = await asyncio.gather(
            asyncio.gather(*(engine_metrics(self.reach, v) for v in ready)),
            queued_at_fronts(self.fleet, gateways, models),
        )
        at = time.monotonic()
        watch = watch if watch is not None else self.watch
        watch.keep_only(v.name for v in ready)
        loads = []
        for view, text in zip(ready, texts, strict=True):
            if text is None:
                continue
            load = watch.add(view.name, str(view.spec.get("engine") or ""), text, at)
            if load.waiting is not None:  # an engine that says its load (llama-cpp-python does not)
                loads.append(load)
        if not loads:
            return Reading(ready=0, waiting=0.0)
        kv = [load.kv_use for load in loads if load.kv_use is not None]
        latency = combined(list(watch.windows.values()))
        return Reading(
            ready=len(loads),
            waiting=(sum(load.waiting or 0 for load in loads) + queued) / len(loads),
            kv_use=sum(kv) / len(kv) if kv else None,
            ttft_p99=latency.ttft_p99 if latency is not None else None,
            itl_p99=latency.itl_p99 if latency is not None else None,
        )


async def carried_document(fleet: Any, name: str) -> ServiceDoc:
    """The document the newest replica of service `name` carries (what `apply` gave it).

    Raises:
        BadInput: no replica of that service runs here.
    """
    from llmgw_core.errors import BadInput

    mine = sorted(
        (v for v in await replicas_now(fleet) if v.service == name), key=lambda v: -v.created_at
    )
    for view in mine:
        carried = (view.spec.get("service") or {}).get("document")
        if isinstance(carried, dict):
            return ServiceDoc.model_validate(carried)
    raise BadInput(
        f"no replica of a service {name!r} runs here to read its document from",
        "keep it with its document: `keep: {file: chat.yaml}`",
    )


async def keep_service(
    fleet: Any,
    reach: EngineReach,
    doc: ServiceDoc,
    base: ServeRequest,
    model: Any,
    *,
    duration_s: float | None = None,
    interval_s: float = KEEP_INTERVAL_S,
    progress: Progress = lambda _line: None,
    holder: str | None = None,
    lease_ttl_s: float = LEASE_TTL_S,
) -> dict[str, Any]:
    """Keep `doc` running for `duration_s` (None: until cancelled), under the service's lease.

    Returns:
        `{service, events, replicas, cycles, cycle_ms_median, failed?, exit_code?}`, also
        when cancelled; `failed` when it stopped on an error (its lease lost, say).

    Raises:
        ServiceHeld: another operator (or keeper) holds the service's lease.
    """
    keeper = Keeper(fleet, reach, doc, replace(base, name=None), model, progress=progress)
    ends = None if duration_s is None else time.monotonic() + duration_s
    failed: LlmgwError | None = None
    async with service_lease(fleet, doc.name, holder=holder, ttl_s=lease_ttl_s) as held:
        try:
            while ends is None or time.monotonic() < ends:
                await keeper.cycle(held)
                await _sleep_until(interval_s, ends)
        except asyncio.CancelledError:
            # Interrupted: what runs keeps running as it is. The cancel is taken here, so the
            # task's count of cancels in flight goes back down (Python 3.11's `uncancel`).
            current = asyncio.current_task()
            if current is not None and hasattr(current, "uncancel"):
                current.uncancel()
        except LlmgwError as exc:
            keeper.say("stopped", doc.name, exc.sentence())
            failed = exc
        views = await replicas_now(fleet)
    result = _result(keeper, views)
    if failed is not None:
        result.update(failed=failed.sentence(), exit_code=failed.exit_code)
    return result


async def _sleep_until(interval_s: float, ends: float | None) -> None:
    left = interval_s if ends is None else min(interval_s, max(0.0, ends - time.monotonic()))
    await asyncio.sleep(left)


def _result(keeper: Keeper, views: tuple[ReplicaView, ...]) -> dict[str, Any]:
    cycle_ms = sorted(s * 1000 for s in keeper.cycle_s)
    return {
        "service": keeper.doc.name,
        "events": [event.as_dict() for event in keeper.events],
        "replicas": [
            {"name": v.name, "phase": v.phase, "endpoint": v.endpoint}
            for v in views
            if v.service == keeper.doc.name
        ],
        "cycles": keeper.cycles,
        "unread_cycles": keeper.unread,
        "cycle_ms_median": round(cycle_ms[len(cycle_ms) // 2], 1) if cycle_ms else None,
    }
