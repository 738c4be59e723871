"""A replica that lost a node, placed again once there is room: on the node back, or another.

A node lost (or a shard died) fails its replica and `replicas.reconcile`
stops what is left, so no card stays claimed. Healing then serves the same
way again under the same name, from what the shards themselves carry — so
any console can do it, not only the one that served it first:

* only a replica that served once (rank 0's health answered) is healed; one
  that never came up failed for a reason another start would meet again;
* only when every shard is over (nothing of it still holds a card);
* at most `MAX_HEALS` times, so a replica that keeps dying is left failed
  for a person to read its logs.

A worker of a disaggregated service is healed as that worker: on its side,
with its connector's flags, on a node its KV still reaches the other side
from (`disagg_start.start_worker`), never as an ordinary replica.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmgw_core.engines.spec import PdLaunch
from llmgw_core.errors import BadInput
from llmgw_core.memory.adapters import LoraSlots
from llmgw_core.placement import explain, place, want_summary
from llmgw_core.serve.choice import Choice
from llmgw_core.serve.disagg_start import start_worker, worker_nodes
from llmgw_core.serve.http import EngineReach
from llmgw_core.serve.keys import hub_token_env, operator_key
from llmgw_core.serve.prepare import Resolved
from llmgw_core.serve.replicas import fleet_views, replicas_now, stop_replica
from llmgw_core.serve.start import ServeOutcome, ServeRequest, serve_way
from llmgw_core.serve.view import ReplicaView

MAX_HEALS = 3


def heal_candidates(views: Sequence[ReplicaView]) -> list[ReplicaView]:
    """The replicas to place again: served once, every shard over, not healed too often."""
    found = []
    for view in views:
        head = view.head
        if view.phase not in ("failed", "stopped") or view.live_shards():
            continue
        if head is None or not head.served or "request" not in view.spec:
            continue
        if int(view.spec.get("heals") or 0) >= MAX_HEALS:
            continue
        found.append(view)
    return found


async def heal(fleet: Any, reach: EngineReach, *, grace_s: float) -> list[dict[str, Any]]:
    """Place again every replica `heal_candidates` names; one line per replica on what happened."""
    done = []
    for view in heal_candidates(await replicas_now(fleet, grace_s=grace_s)):
        spec = view.spec
        asked = spec["request"]
        choice = Choice(**asked["choice"])
        models = tuple(asked.get("models") or ())
        views = await fleet_views(fleet)
        if view.role is not None:  # a worker of a split goes where its KV reaches the other side
            near = [str(n.get("node")) for n in spec.get("placement", {}).get("nodes") or []]
            views = worker_nodes(views, PdLaunch.of_record(spec["pd"]), near)
        want = choice.want(models)
        if place(want, views) is None:
            done.append(
                {
                    "name": view.name,
                    "outcome": "waiting for room",
                    "reason": want_summary(explain(want, views)),
                }
            )
            continue
        key_env = asked.get("api_key_env")
        try:
            api_key = operator_key(key_env, "the replica's key") if key_env else None
        except BadInput as exc:
            done.append({"name": view.name, "outcome": "not healed", "reason": exc.sentence()})
            continue
        await stop_replica(fleet, view.name)  # forget the ended shards: a new attempt replaces them
        request = ServeRequest(
            model=str(spec.get("model")),
            name=view.name,
            context=int(spec["context"]),
            concurrency=int(asked.get("concurrency") or 1),
            env=dict(asked.get("env") or {}),
            startup_timeout_s=float(asked.get("timeout_s") or 1200.0),
            source=asked.get("source"),
            hub_repo=asked.get("hub_repo"),
            revision=asked.get("revision"),
            secret_env=hub_token_env() if asked.get("hub_repo") else {},
            api_key=api_key,
            api_key_env=key_env,
            rails="all" if asked.get("rails") == "all" else "tested",
            service=spec.get("service") if isinstance(spec.get("service"), dict) else None,
            engine_args=_recorded_args(asked.get("engine_args")),
            lora=LoraSlots.from_record(asked.get("lora")),
        )
        if view.role is not None:
            served_name = str(spec.get("served_name") or view.name)
            resolved = Resolved(view.name, int(spec["context"]), (choice,), served_name, models)
            heals = int(spec.get("heals") or 0) + 1
            record = await start_worker(
                fleet, reach, request, choice, resolved, view.name, view, heals
            )
            done.append(
                {
                    "name": view.name,
                    "role": view.role,
                    **{k: record.get(k) for k in ("outcome", "reason", "placement", "trace")},
                }
            )
            continue
        outcome = ServeOutcome(name=view.name, phase="failed")
        record = await serve_way(
            fleet,
            reach,
            request,
            choice,
            view.name,
            str(spec.get("served_name") or view.name),
            models,
            int(spec["context"]),
            int(spec.get("attempt") or 1) + 1,
            outcome,
            heals=int(spec.get("heals") or 0) + 1,
        )
        done.append(
            {
                "name": view.name,
                "outcome": record["outcome"],
                "reason": record.get("reason"),
                "placement": outcome.placement,
                "trace": outcome.trace.steps,
            }
        )
    return done


def _recorded_args(value: Any) -> dict[str, str | bool]:
    """A replica's recorded engine flags (already checked when it was served); {} for anything
    that is not a mapping of names to text or booleans."""
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str | bool)}
