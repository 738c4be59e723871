"""Gateways on the live fleet: start or adopt, follow the replicas, measure, stop.

Nothing is kept between calls: a gateway is whatever shard of kind
`llmgw-gateway` a node runs, so any console adopts a running one. The
router's API is reached like an engine's, through an SSH tunnel to the
node's loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import quote

import httpx

from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.fleet.client import AgentError, AgentLost
from llmgw_core.gateway.keys import client_keys, front_config, read_tls, upstream_key_envs
from llmgw_core.gateway.spec import (
    FRONT_CONFIG_VARIABLE,
    ROUTER_INSTALL,
    GatewayArgs,
    GatewayPorts,
    GatewayView,
    Worker,
    gateway_views,
    keyed_for,
    live_gateway,
    plain_line,
    processed_requests,
    router_argv,
    router_program,
    shard_args,
    unchecked_workers,
    wanted_workers,
    worker_changes,
)
from llmgw_core.serve.http import EngineReach, Tunnel, health_status
from llmgw_core.serve.replicas import replicas_now, shard_lines, shard_listings, stop_shard

START_TIMEOUT_S = 60.0
ROUTER_TIMEOUT_S = 10.0
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
    return {spec.name: spec.host for spec in fleet.inventory.node_specs()}


async def _router(reach: EngineReach, gateway: GatewayView) -> Tunnel:
    """The router's own API (its loopback port), through a tunnel: never the front's."""
    return await reach.tunnel(gateway.node, gateway.api_port)


async def router_workers(reach: EngineReach, gateway: GatewayView) -> dict[str, dict[str, Any]]:
    """The router's workers now: URL → `{model, healthy}`.

    Raises:
        LlmgwError: the router does not answer.
    """
    tunnel = await _router(reach, gateway)
    base = tunnel.url
    try:
        async with tunnel.client(timeout=ROUTER_TIMEOUT_S) as client:
            response = await client.get(base + "/workers")
            listed = response.json().get("workers") or []
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        raise LlmgwError(
            f"the router of gateway {gateway.name} on {gateway.node} did not list its workers: {exc}"
        ) from None
    return {
        str(w.get("url")): {"model": str(w.get("model_id")), "healthy": w.get("is_healthy")}
        for w in listed
        if isinstance(w, dict)
    }


async def change_workers(
    reach: EngineReach, gateway: GatewayView, add: tuple[Worker, ...], remove: tuple[str, ...]
) -> None:
    """Remove then add workers through the router's `/workers` API (no restart, no dropped request).

    Raises:
        LlmgwError: the router refused a change.
        httpx.HTTPError: the router did not answer.
    """
    tunnel = await _router(reach, gateway)
    base = tunnel.url
    async with tunnel.client(timeout=ROUTER_TIMEOUT_S) as client:
        for url in remove:
            response = await client.delete(f"{base}/workers/{quote(url, safe='')}")
            if response.status_code != 200:
                raise LlmgwError(
                    f"the router of {gateway.name} would not remove {url}: {response.text[:200]}"
                )
        for worker in add:
            response = await client.post(
                base + "/workers", json={"url": worker.url, "model_id": worker.model}
            )
            if response.status_code != 200:
                raise LlmgwError(
                    f"the router of {gateway.name} would not add {worker.url}: {response.text[:200]}"
                )


async def follow(fleet: Any, reach: EngineReach, gateway: GatewayView) -> dict[str, Any]:
    """Make the router's workers exactly the ready replicas' engines; say what changed.

    Raises:
        LlmgwError: the router does not answer or refuses a change.
    """
    replicas = await replicas_now(fleet)
    fronted, unkeyed = keyed_for(replicas, gateway)
    wanted = wanted_workers(fronted, gateway.node, _hosts(fleet))
    try:
        present = await router_workers(reach, gateway)
        add, remove = worker_changes(wanted, {u: w["model"] for u, w in present.items()})
        await change_workers(reach, gateway, add, remove)
    except httpx.HTTPError as exc:
        raise LlmgwError(f"the router of gateway {gateway.name} did not answer: {exc}") from None
    return {
        **gateway.as_dict(),
        "workers": [{"url": w.url, "model": w.model, "replica": w.replica} for w in wanted],
        "added": [w.url for w in add],
        "removed": list(remove),
        "warnings": [*unchecked_workers(replicas), *unkeyed],
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
    """Every running gateway with its router's workers now (what the console lists)."""
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
    answer = await fleet.request(node, "port.free", {"start": port, "count": 1, "avoid": []})
    return (answer.get("ports") or [None])[0] == port


PORT_TRIES = 3
"""Starts of a router whose ports were taken between the check and its bind, before giving up."""
ADDRESS_IN_USE = "Address already in use"
"""What the router says when a port it was given is taken (`os error 98`)."""


async def _ports(fleet: Any, node: str, port: int, avoid: tuple[int, ...] = ()) -> GatewayPorts:
    """The front's `port`, then three free ones after it: the router's, its metrics, the front's
    (none of `avoid`, the ones a start that lost a race for them tried)."""
    start = port + 1 if port < 65533 else 1024
    answer = await fleet.request(
        node, "port.free", {"start": start, "count": 3, "avoid": [port, *avoid]}
    )
    found = [int(p) for p in answer.get("ports") or []]
    if len(found) < 3:
        raise LlmgwError(f"{node} has no three free ports for the gateway's router from {start}")
    return GatewayPorts(port=port, router=found[0], prometheus=found[1], front_metrics=found[2])


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
    ready replica, the router's executable, the port. With `any_port` (the
    console's wizard, which asks for no port) a port in use is passed over for
    the next free one; a script's port is taken or refused.

    Raises:
        BadInput: one of those checks failed (nothing was started).
        LlmgwError: the router was started and did not come up (it is stopped again).
    """
    views = await gateways_now(fleet)
    running = live_gateway(views, args.name)
    if running is not None:
        return {**await follow(fleet, reach, running), "adopted": True}
    ended = [view for view in views if view.name == args.name]
    environ = dict(os.environ) if environ is None else environ
    node = args.node or _default_node(fleet)
    spec = fleet.inventory.node_spec(node)  # BadInput naming the nodes there are
    keys = client_keys(args.api_key_env, args.keys_file, environ)
    state = fleet.snapshot().nodes.get(node)
    if state is None or state.state != "ready":
        raise LlmgwError(f"{node} does not answer, so no gateway can start there")
    replicas = await replicas_now(fleet)
    if not wanted_workers(replicas, node, _hosts(fleet)):
        raise BadInput(f"no replica is ready for gateway {args.name} to front", "serve one first")
    key_envs = upstream_key_envs(replicas)
    tls = read_tls(args.tls.cert, args.tls.key) if args.tls else None
    config = front_config(keys, key_envs, environ, tls)
    installed = state.facts.engines if state.facts is not None else {}
    program = router_program(spec.engines, installed)
    if program is None:
        raise BadInput(
            f"{node} has no vllm-router for gateway {args.name}",
            f"install it there with `{ROUTER_INSTALL}` (and name it in the inventory: "
            "engines: router: {bin: …} when it is off PATH)",
        )
    if not await _port_is_free(fleet, node, args.port):
        if not any_port:
            raise BadInput(f"port {args.port} on {node} is in use", "give the gateway another port")
        found = await fleet.request(node, "port.free", {"start": args.port + 1, "count": 1})
        args = args.model_copy(update={"port": int((found.get("ports") or [args.port])[0])})
    for old in ended:  # the record of its last run (crashed or killed), once all checks passed
        await stop_shard(fleet, old.node, old.shard_id, forget=True)
    tried: tuple[int, ...] = ()
    attempt = 0
    while True:
        attempt += 1
        ports = await _ports(fleet, node, args.port, tried)
        request = shard_args(
            args,
            router_argv(program, args, ports),
            node=node,
            ports=ports,
            created_at=time.time(),
            upstream_key_envs=key_envs,
        )
        request["secret_env"] = {FRONT_CONFIG_VARIABLE: config}
        started = await fleet.request(node, "shard.start", request, timeout_s=30.0)
        shard_id = str(started["shard_id"])
        try:
            gateway = await _wait_up(fleet, reach, node, shard_id, ports.front_metrics)
        except LlmgwError as exc:
            # A port found free was taken before the router bound it (the node is shared):
            # try other ports. Anything else is the router's own failure, kept to be read.
            lost_race = ADDRESS_IN_USE in str(exc) and attempt < PORT_TRIES
            await stop_shard(fleet, node, shard_id, forget=lost_race)
            if not lost_race:
                raise
            tried += (ports.router, ports.prometheus, ports.front_metrics)
            continue
        return {**await follow(fleet, reach, gateway), "adopted": False}


async def _wait_up(
    fleet: Any, reach: EngineReach, node: str, shard_id: str, port: int
) -> GatewayView:
    """Wait until the router answers its liveness route (asked by the front on its loopback
    `port`); fail with its last line if it ends."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        views = gateway_views({node: (await shard_listings(fleet)).get(node, [])})
        view = next((v for v in views if v.shard_id == shard_id), None)
        if view is None or not view.live:
            why = (view.reason if view else None) or "its shard is gone"
            lines = await _last_lines(fleet, node, shard_id)
            raise LlmgwError(f"the router on {node} did not start: {why}{lines}")
        if await health_status(reach, node, port, "/liveness") == 200:
            return view
        await asyncio.sleep(POLL_S)
    raise LlmgwError(f"the router on {node} did not answer within {START_TIMEOUT_S:g} s")


async def _last_lines(fleet: Any, node: str, shard_id: str) -> str:
    """The router's own last line (its error), else the agent's line about it."""
    try:
        lines = [line for line in await shard_lines(fleet, node, shard_id, 5) if line.strip()]
    except (LlmgwError, AgentLost):
        return ""
    own = [line for line in lines if not line.lstrip().startswith("[llmgw]")]
    return f" ({(own or lines)[-1].strip()})" if lines else ""


async def stop_gateway(fleet: Any, name: str) -> dict[str, Any]:
    """Stop and forget the gateway's router (nothing of it keeps running).

    A router that already ended (crashed, killed) is forgotten all the same.

    Raises:
        BadInput: no gateway by that name is on any node that answers.
    """
    views = [view for view in await gateways_now(fleet) if view.name == name]
    if not views:
        await find_gateway(fleet, name)  # raises, naming the running ones
    for view in views:
        try:
            await fleet.request(
                view.node, "shard.stop", {"shard_id": view.shard_id, "timeout_s": 10}
            )
            await fleet.request(view.node, "shard.forget", {"shard_id": view.shard_id})
        except (AgentError, AgentLost) as exc:
            raise LlmgwError(f"gateway {name} on {view.node} did not stop: {exc}") from None
    first = views[0]
    return {"gateway": name, "node": first.node, "shard_id": first.shard_id, "stopped": True}


async def gateway_log_batches(
    fleet: Any, name: str, *, lines: int = 200, follow: bool = False
) -> AsyncGenerator[list[str], None]:
    """The router's last `lines` lines, then (with `follow`) what it writes next, in batches.

    Each line is `[gateway node] …` without the router's colours. The
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
        "shard.logs", {"shard_id": view.shard_id, "tail": lines, "follow": follow}
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
    """The last lines of the gateway's router, each prefixed `[gateway node]` (read once).

    Raises:
        BadInput: no gateway by that name ran here.
    """
    found: list[str] = []
    async for batch in gateway_log_batches(fleet, name, lines=lines):
        found.extend(batch)
    return found[-lines:]


async def processed_by_worker(reach: EngineReach, gateway: GatewayView) -> dict[str, float]:
    """The router's own count of requests sent to each worker (its Prometheus port)."""
    tunnel = await reach.tunnel(gateway.node, gateway.prometheus_port)
    try:
        async with tunnel.client(timeout=ROUTER_TIMEOUT_S) as client:
            text = (await client.get(tunnel.url + "/metrics")).text
    except httpx.HTTPError:
        return {}
    return processed_requests(text)
