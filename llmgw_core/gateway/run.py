"""Gateways on the live fleet: start or adopt, follow the replicas, measure, stop.

Nothing is kept between calls: a gateway is whatever shard of kind
`llmgw-gateway` a node runs, so any console adopts a running one. Its
front's control socket (workers, counters, liveness) is reached through the
node's agent (`gateway.call`), never through a port another user could open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncGenerator, Collection, Sequence
from typing import Any
from urllib.parse import quote

from llmgw_agent.ops import Op
from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.fleet.client import AgentError, AgentLost
from llmgw_core.gateway.keys import client_keys, front_config, read_tls, upstream_key_envs
from llmgw_core.gateway.spec import (
    FRONT_CONFIG_VARIABLE,
    GatewayArgs,
    GatewayView,
    Worker,
    gateway_views,
    keyed_for,
    live_gateway,
    plain_line,
    processed_requests,
    queued_requests,
    served_text,
    shard_args,
    unchecked_workers,
    wanted_workers,
    worker_changes,
)
from llmgw_core.serve.http import EngineReach
from llmgw_core.serve.replicas import replicas_now, shard_lines, shard_listings, stop_shard

START_TIMEOUT_S = 60.0
POLL_S = 0.25


async def gateways_now(fleet: Any) -> tuple[GatewayView, ...]:
    """Every gateway the nodes run (or ran), read from their shards now."""
    return gateway_views(await shard_listings(fleet))


async def find_gateway(fleet: Any, name: str) -> GatewayView:
    """The running gateway called `name`.

    Raises:
        BadInput: none runs by that name (naming those that do).
    """
    views = await gateways_now(fleet)
    found = live_gateway(views, name)
    if found is None:
        names = ", ".join(sorted({v.name for v in views if v.live})) or "none"
        raise BadInput(f"no gateway is named {name!r}", f"the running gateways are: {names}")
    return found


def _hosts(fleet: Any) -> dict[str, str]:
    # A Slurm job's node is reached at the address Slurm gives it (its `host` is the login
    # node, through which the console reaches its agent).
    return {
        spec.name: (spec.engine_bind or spec.host) if spec.relay else spec.host
        for spec in fleet.inventory.node_specs()
    }


CALL_TIMEOUT_S = 15.0


async def front_call(
    fleet: Any, gateway: GatewayView, method: str, path: str, body: dict | None = None
) -> tuple[int, str]:
    """One request on the gateway's control socket, through its node's agent: (status, body).

    Raises:
        LlmgwError: the agent or the front does not answer.
    """
    args: dict[str, Any] = {"shard_id": gateway.shard_id, "method": method, "path": path}
    if body is not None:
        args["body"] = body
    try:
        answer = await fleet.request(gateway.node, Op.GATEWAY_CALL, args, timeout_s=CALL_TIMEOUT_S)
    except (AgentError, AgentLost) as exc:
        raise LlmgwError(
            f"the front of gateway {gateway.name} on {gateway.node} does not answer: {exc}"
        ) from None
    return int(answer.get("status") or 0), str(answer.get("body") or "")


async def router_workers(reach: EngineReach, gateway: GatewayView) -> dict[str, dict[str, Any]]:
    """The front's workers now: URL → `{model, healthy}`.

    Raises:
        LlmgwError: the front does not answer.
    """
    status, text = await front_call(reach.fleet, gateway, "GET", "/workers")
    try:
        listed = json.loads(text).get("workers") if status == 200 else None
    except (ValueError, AttributeError):
        listed = None
    if not isinstance(listed, list):
        raise LlmgwError(
            f"the front of gateway {gateway.name} on {gateway.node} did not list its workers "
            f"({status}: {text[:200]})"
        )
    return {
        str(w.get("url")): {
            "model": str(w.get("model_id")),
            "healthy": w.get("is_healthy"),
            "adapters": w.get("adapters") if isinstance(w.get("adapters"), dict) else {},
            "base": w.get("base") is not False,
            "role": w.get("role") if w.get("role") in ("prefill", "decode") else None,
            "bootstrap_port": (
                w.get("bootstrap_port")
                if isinstance(w.get("bootstrap_port"), int)
                and not isinstance(w.get("bootstrap_port"), bool)
                else None
            ),
        }
        for w in listed
        if isinstance(w, dict)
    }


async def change_workers(
    reach: EngineReach, gateway: GatewayView, add: tuple[Worker, ...], remove: tuple[str, ...]
) -> None:
    """Remove then add workers on the front's control socket (no restart, no dropped request).

    Raises:
        LlmgwError: the front refused a change, or does not answer.
    """
    # A worker added at a URL the front holds replaces it there (its counters kept): taking it
    # out first would leave a moment with no worker for its model.
    replaced = {worker.url for worker in add}
    for url in (u for u in remove if u not in replaced):
        status, text = await front_call(
            reach.fleet, gateway, "DELETE", f"/workers/{quote(url, safe='')}"
        )
        if status not in (200, 404):
            raise LlmgwError(f"the front of {gateway.name} would not remove {url}: {text[:200]}")
    for worker in add:
        body: dict[str, Any] = {"url": worker.url, "model_id": worker.model}
        if worker.adapters:
            body["adapters"] = dict(worker.adapters)
            body["base"] = worker.base
        if worker.cert is not None:
            body["cert"] = worker.cert
        if worker.role is not None:
            body["role"] = worker.role
        if worker.bootstrap_port is not None:
            body["bootstrap_port"] = worker.bootstrap_port
        status, text = await front_call(reach.fleet, gateway, "POST", "/workers", body)
        if status != 200:
            raise LlmgwError(
                f"the front of {gateway.name} would not add {worker.url}: {text[:200]}"
            )


async def follow(fleet: Any, reach: EngineReach, gateway: GatewayView) -> dict[str, Any]:
    """Make the front's workers exactly the ready replicas' engines; say what changed.

    Raises:
        LlmgwError: the front does not answer or refuses a change.
    """
    replicas = await replicas_now(fleet)
    fronted, unkeyed = keyed_for(replicas, gateway)
    wanted = wanted_workers(fronted, gateway.node, _hosts(fleet))
    present = await router_workers(reach, gateway)
    add, remove = worker_changes(
        wanted,
        {
            u: served_text(w["model"], w["adapters"], w["base"], w["role"], w["bootstrap_port"])
            for u, w in present.items()
        },
    )
    await change_workers(reach, gateway, add, remove)
    return {
        **gateway.as_dict(),
        "workers": [
            {
                "url": w.url,
                "model": w.model,
                "replica": w.replica,
                **({"role": w.role} if w.role else {}),
            }
            for w in wanted
        ],
        "added": [w.url for w in add],
        "removed": list(remove),
        "warnings": [*unchecked_workers(replicas, gateway.health_path), *unkeyed],
    }


async def follow_all(fleet: Any, reach: EngineReach) -> list[dict[str, Any]]:
    """Every running gateway follows the replicas; a gateway that fails says why, alone."""
    results = []
    for gateway in [g for g in await gateways_now(fleet) if g.live]:
        try:
            results.append(await follow(fleet, reach, gateway))
        except LlmgwError as exc:
            results.append({**gateway.as_dict(), "error": exc.sentence()})
    return results


async def gateway_summaries(fleet: Any, reach: EngineReach) -> list[dict[str, Any]]:
    """Every running gateway with its front's workers now (what the console lists)."""
    summaries = []
    for gateway in [g for g in await gateways_now(fleet) if g.live]:
        summary: dict[str, Any] = {**gateway.as_dict(), "workers": {}}
        try:
            summary["workers"] = await router_workers(reach, gateway)
        except LlmgwError as exc:
            summary["error"] = exc.sentence()
        summaries.append(summary)
    return summaries


def _default_node(fleet: Any) -> str:
    """The first ready node without GPUs, else the inventory's first node."""
    for node in fleet.snapshot().ready():
        if node.facts is not None and not node.facts.gpus:
            return node.name
    return fleet.inventory.node_specs()[0].name


async def _port_is_free(fleet: Any, node: str, port: int) -> bool:
    answer = await fleet.request(node, Op.PORT_FREE, {"start": port, "count": 1, "avoid": []})
    return (answer.get("ports") or [None])[0] == port


async def start_gateway(
    fleet: Any,
    reach: EngineReach,
    args: GatewayArgs,
    environ: dict[str, str] | None = None,
    *,
    any_port: bool = False,
) -> dict[str, Any]:
    """Start the gateway `args` names (or adopt it when it runs), then make it follow the replicas.

    Every check comes before anything starts: the node, the key's variable, a
    ready replica, the port. With `any_port` (the console's wizard, which asks
    for no port) a port in use is passed over for the next free one; a
    script's port is taken or refused.

    Raises:
        BadInput: one of those checks failed (nothing was started).
        LlmgwError: the front was started and did not come up (it is stopped again).
    """
    views = await gateways_now(fleet)
    running = live_gateway(views, args.name)
    if running is not None:
        return {**await follow(fleet, reach, running), "adopted": True}
    ended = [view for view in views if view.name == args.name]
    environ = dict(os.environ) if environ is None else environ
    node = args.node or _default_node(fleet)
    fleet.inventory.node_spec(node)  # BadInput naming the nodes there are
    keys = client_keys(args.api_key_env, args.keys_file, environ)
    state = fleet.snapshot().nodes.get(node)
    if state is None or state.state != "ready":
        raise LlmgwError(f"{node} does not answer, so no gateway can start there")
    replicas = await replicas_now(fleet)
    if not wanted_workers(replicas, node, _hosts(fleet)):
        raise BadInput(f"no replica is ready for gateway {args.name} to front", "serve one first")
    key_envs = upstream_key_envs(replicas)
    tls = read_tls(args.tls.cert, args.tls.key) if args.tls else None
    fair = args.fair.model_dump() if args.fair is not None else None
    config = front_config(keys, key_envs, environ, tls, store=args.name, fair=fair)
    if not await _port_is_free(fleet, node, args.port):
        if not any_port:
            raise BadInput(f"port {args.port} on {node} is in use", "give the gateway another port")
        found = await fleet.request(node, Op.PORT_FREE, {"start": args.port + 1, "count": 1})
        args = args.model_copy(update={"port": int((found.get("ports") or [args.port])[0])})
    for old in ended:  # the record of its last run (crashed or killed), once all checks passed
        await stop_shard(fleet, old.node, old.shard_id, forget=True)
    request = shard_args(args, node=node, created_at=time.time(), upstream_key_envs=key_envs)
    request["secret_env"] = {FRONT_CONFIG_VARIABLE: config}
    started = await fleet.request(node, Op.SHARD_START, request, timeout_s=30.0)
    shard_id = str(started["shard_id"])
    try:
        gateway = await _wait_up(fleet, node, shard_id)
    except LlmgwError:
        await stop_shard(fleet, node, shard_id, forget=False)  # kept, to read its log
        raise
    return {**await follow(fleet, reach, gateway), "adopted": False}


async def _wait_up(fleet: Any, node: str, shard_id: str) -> GatewayView:
    """Wait until the front answers its liveness on its control socket; fail with its last
    line if it ends."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        views = gateway_views({node: (await shard_listings(fleet)).get(node, [])})
        view = next((v for v in views if v.shard_id == shard_id), None)
        if view is None or not view.live:
            why = (view.reason if view else None) or "its shard is gone"
            lines = await _last_lines(fleet, node, shard_id)
            raise LlmgwError(f"the gateway's front on {node} did not start: {why}{lines}")
        with contextlib.suppress(LlmgwError):
            if (await front_call(fleet, view, "GET", "/liveness"))[0] == 200:
                return view
        await asyncio.sleep(POLL_S)
    raise LlmgwError(f"the gateway's front on {node} did not answer within {START_TIMEOUT_S:g} s")


async def _last_lines(fleet: Any, node: str, shard_id: str) -> str:
    """The front's own last line (its error), else the agent's line about it."""
    try:
        lines = [line for line in await shard_lines(fleet, node, shard_id, 5) if line.strip()]
    except (LlmgwError, AgentLost):
        return ""
    own = [line for line in lines if not line.lstrip().startswith("[llmgw]")]
    return f" ({(own or lines)[-1].strip()})" if lines else ""


async def stop_gateway(fleet: Any, name: str) -> dict[str, Any]:
    """Stop and forget the gateway's front (nothing of it keeps running).

    A front that already ended (crashed, killed) is forgotten all the same.

    Raises:
        BadInput: no gateway by that name is on any node that answers.
    """
    views = [view for view in await gateways_now(fleet) if view.name == name]
    if not views:
        await find_gateway(fleet, name)  # raises, naming the running ones
    for view in views:
        try:
            await fleet.request(
                view.node, Op.SHARD_STOP, {"shard_id": view.shard_id, "timeout_s": 10}
            )
            await fleet.request(view.node, Op.SHARD_FORGET, {"shard_id": view.shard_id})
        except (AgentError, AgentLost) as exc:
            raise LlmgwError(f"gateway {name} on {view.node} did not stop: {exc}") from None
    first = views[0]
    return {"gateway": name, "node": first.node, "shard_id": first.shard_id, "stopped": True}


async def gateway_log_batches(
    fleet: Any, name: str, *, lines: int = 200, follow: bool = False
) -> AsyncGenerator[list[str], None]:
    """The front's last `lines` lines, then (with `follow`) what it writes next, in batches.

    Each line is `[gateway node] …` without colours. The
    headless `logs` step reads it once; the console follows it live.

    Raises:
        BadInput: no gateway by that name ran here (a stopped one is forgotten with its log).
    """
    views = await gateways_now(fleet)
    named = [view for view in views if view.name == name]
    if not named:
        names = ", ".join(sorted({v.name for v in views})) or "none"
        raise BadInput(f"no gateway is named {name!r}", f"the gateways are: {names}")
    view = named[0]
    prefix = f"[gateway {view.node}] "
    stream = fleet.client(view.node).stream(
        Op.SHARD_LOGS, {"shard_id": view.shard_id, "tail": lines, "follow": follow}
    )
    try:
        async for event in stream:
            batch = [prefix + plain_line(str(line)) for line in event.get("lines") or []]
            if batch:
                yield batch
    finally:  # the reader left early (the console closed the view): the agent stops sending
        with contextlib.suppress(LlmgwError):
            await stream.cancel()


async def gateway_logs(fleet: Any, name: str, *, lines: int = 200) -> list[str]:
    """The last lines of the gateway's front, each prefixed `[gateway node]` (read once).

    Raises:
        BadInput: no gateway by that name ran here.
    """
    found: list[str] = []
    async for batch in gateway_log_batches(fleet, name, lines=lines):
        found.extend(batch)
    return found[-lines:]


async def processed_by_worker(reach: EngineReach, gateway: GatewayView) -> dict[str, float]:
    """The front's own count of requests sent to each worker (its control socket's metrics)."""
    try:
        status, text = await front_call(reach.fleet, gateway, "GET", "/metrics")
    except LlmgwError:
        return {}
    return processed_requests(text) if status == 200 else {}


async def queued_at_fronts(
    fleet: Any, gateways: Sequence[GatewayView], models: Collection[str]
) -> int:
    """The requests for `models` waiting at the fronts of `gateways` that keep fair shares
    (load their engines are not queueing); a front that does not answer counts none."""
    fronts = [g for g in gateways if g.live and g.fair]

    async def one(gateway: GatewayView) -> float:
        try:
            status, text = await front_call(fleet, gateway, "GET", "/metrics")
        except LlmgwError:
            return 0.0
        found = queued_requests(text) if status == 200 else {}
        return sum(found.get(model, 0.0) for model in models)

    return int(sum(await asyncio.gather(*(one(g) for g in fronts))))


def gateway_key_warning(started: dict[str, Any], api_key_env: str | None) -> str | None:
    """Why a keyed replica put behind a gateway that was running already is open through it: the
    gateway takes requests without a key (its own start's keys are kept when it is adopted)."""
    keyed = started.get("api_key_env") or started.get("keys_file")
    if not started.get("adopted") or api_key_env is None or keyed:
        return None
    return (
        f"gateway {started.get('name')} takes requests without a key, so anyone who reaches "
        f"{started.get('address')} is answered by replicas whose engines take {api_key_env}: "
        "stop the gateway and put the replica behind it again"
    )


USAGE_FIELDS = ("requests", "answered", "prompt_tokens", "completion_tokens")
"""What the front's access log sums per UTC day, key and model (`front/access.py`)."""


async def gateway_usage(fleet: Any, name: str, *, key: str | None = None) -> dict[str, Any]:
    """What each client key of gateway `name` used, per UTC day and model, from its front's
    access log: `{gateway, usage: [{day, key, model, requests, answered, prompt_tokens,
    completion_tokens}], totals: {key: {requests, …}}}`; `key` keeps one key's.

    Raises:
        LlmgwError: no such gateway, or its front did not say.
    """
    gateway = await find_gateway(fleet, name)
    status, body = await front_call(fleet, gateway, "GET", "/usage")
    rows = _usage_rows(status, body, name)
    if key is not None:
        rows = [row for row in rows if row["key"] == key]
    totals: dict[str, dict[str, int]] = {}
    for row in rows:
        into = totals.setdefault(row["key"], dict.fromkeys(USAGE_FIELDS, 0))
        for field in USAGE_FIELDS:
            into[field] += row[field]
    return {"gateway": name, "usage": rows, "totals": totals}


def _usage_rows(status: int, body: str, name: str) -> list[dict[str, Any]]:
    """The front's answer, checked: it comes from a node, so it is read as untrusted."""
    fault = LlmgwError(f"the front of gateway {name} did not say its usage (status {status})")
    if status != 200:
        raise fault
    try:
        return [
            {
                "day": str(row["day"]),
                "key": str(row["key"]),
                "model": str(row["model"]),
                **{field: _count(row[field]) for field in USAGE_FIELDS},
            }
            for row in json.loads(body)["usage"]
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise fault from exc


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a count")
    return value
