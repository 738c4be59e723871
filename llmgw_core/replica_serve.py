"""Serving a replica on the live fleet: plan, place, claim, start, and watch it come up.

`serve` is plan → place → claim → start → ready:

* the plan's ways, narrowed or forced by the operator (`replica_choice`),
  tried in order (the fallbacks);
* placement on the fleet as it is now (`placement.place`), free cards only —
  the agents' claims say which are taken;
* `shard.start` on each node claims its cards atomically: when another
  console won a card first the agent answers `busy`, the shards already
  started are stopped, and the replica is placed again on what is left;
* ready when rank 0's HTTP health answers through an SSH tunnel (never a
  log line); failed when a shard ends, a node is lost, or nothing moved for
  the startup timeout — with the reason and the last lines of every shard.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from llmgw_core.engines import build_launch
from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.fleet.client import AgentError, AgentLost
from llmgw_core.model.source import ModelInfo
from llmgw_core.placement import explain, place, want_summary
from llmgw_core.plan import plan
from llmgw_core.pools_live import planner_fleet
from llmgw_core.replica_choice import Choice, Overrides, choices
from llmgw_core.replica_http import EngineReach, TunnelRefused, health_status
from llmgw_core.replica_launch import (
    HTTP_BASE_PORT,
    RENDEZVOUS_BASE_PORT,
    free_port_on,
    launch_request,
    replica_name,
    replica_spec,
    shard_spec,
)
from llmgw_core.replica_view import assemble
from llmgw_core.replica_weights import copy_to_node
from llmgw_core.replicas import (
    REQUEST_TIMEOUT_S,
    fleet_views,
    shard_lines,
    shard_listings,
    stop_replica,
    stop_shard,
)

STARTUP_TIMEOUT_S = 1200.0
"""How long a replica may show no progress before it is failed (20 minutes)."""

RACE_RETRIES = 6
POLL_S = 0.5
LAST_LINES = 20


@dataclass(frozen=True)
class ServeRequest:
    """What the operator asked `serve` for.

    Attributes:
        model: the model as typed (for messages and the replica's spec).
        name: the replica's name; None derives one from the model.
        format: "gguf", "safetensors" or None.
        context: tokens a sequence may hold; None: the model's trained context.
        concurrency: sequences served at once.
        overrides: the layout the operator fixed.
        env: allowed engine variables for every node.
        fallbacks: how many of the next best ways to try when one fails.
        wait_ready: wait until rank 0's health answers (else return once started).
        startup_timeout_s: how long without progress before failing.
        source: what the engines load instead of the way's own (a path on the nodes).
    """

    model: str
    name: str | None = None
    format: str | None = None
    context: int | None = None
    concurrency: int = 1
    overrides: Overrides = field(default_factory=Overrides)
    env: Mapping[str, str] = field(default_factory=dict)
    fallbacks: int = 0
    wait_ready: bool = True
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    source: str | None = None
    secret_env: Mapping[str, str] = field(default_factory=dict)
    hub_repo: str | None = None


def hub_cache_dir(repo_id: str) -> str:
    """Where `huggingface_hub` keeps a repository on a node, relative to the node's home."""
    return ".cache/huggingface/hub/models--" + repo_id.replace("/", "--")


@dataclass
class Trace:
    """Every step of a start, node by node, with its time."""

    steps: list[dict[str, Any]] = field(default_factory=list)

    def add(self, step: str, node: str | None = None, detail: str | None = None) -> None:
        """Record one step now."""
        self.steps.append(
            {
                "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
                "node": node,
                "step": step,
                "detail": detail,
            }
        )


@dataclass
class ServeOutcome:
    """What `serve` did: the replica's name and phase, every attempt, the trace."""

    name: str
    phase: str
    reason: str | None = None
    choice: Choice | None = None
    placement: dict[str, Any] | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    trace: Trace = field(default_factory=Trace)
    exit_code: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The outcome as the `serve` step gives it."""
        return {
            "name": self.name,
            "phase": self.phase,
            "reason": self.reason,
            "way": self.choice.as_dict() if self.choice else None,
            "placement": self.placement,
            "attempts": self.attempts,
            "trace": self.trace.steps,
        }


# --- serving ----------------------------------------------------------------------------


def _local_free_port() -> int:
    """A free port on this machine (the demo's simulated nodes all live on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _used_ports(records: list[dict[str, Any]]) -> set[int]:
    used: set[int] = set()
    for record in records:
        if record.get("phase") in ("exited", "failed", "stopped"):
            continue
        spec = record.get("spec") or {}
        port = (spec.get("launch") or {}).get("http_port")
        if isinstance(port, int):
            used.add(port)
        rendezvous = (spec.get("replica") or {}).get("rendezvous_port")
        if isinstance(rendezvous, int):
            used.add(rendezvous)
    return used


def _ports(
    fleet: Any, nodes: list[str], listings: Mapping[str, list[dict[str, Any]]]
) -> tuple[dict[str, int], int]:
    """HTTP ports per node and the rendezvous port: free ones, never a running shard's."""
    specs = {s.name: s for s in fleet.inventory.node_specs()}
    if all(specs[n].replay is not None for n in nodes):
        # Simulated nodes share this machine's ports: each shard needs its own.
        return {n: _local_free_port() for n in nodes}, _local_free_port()
    used = {n: _used_ports(listings.get(n, [])) for n in nodes}
    http = {n: free_port_on(used[n], HTTP_BASE_PORT) for n in nodes}
    taken = set().union(*used.values()) if used else set()
    return http, free_port_on(taken | set(http.values()), RENDEZVOUS_BASE_PORT)


async def _last_lines(fleet: Any, shards: list[tuple[str, str, int]]) -> dict[str, list[str]]:
    kept: dict[str, list[str]] = {}
    for node, shard_id, rank in shards:
        try:
            kept[f"r{rank} {node}"] = await shard_lines(fleet, node, shard_id, LAST_LINES)
        except (LlmgwError, AgentLost) as exc:
            kept[f"r{rank} {node}"] = [f"(its lines cannot be read: {exc})"]
    return kept


class StartProgress:
    """When anything last moved: a process starting, a download growing, health answering."""

    def __init__(self) -> None:
        self.last_moved = time.monotonic()
        self.fetched: dict[str, int] = {}
        self.first_seen: dict[str, tuple[float, int]] = {}

    def moved(self) -> None:
        self.last_moved = time.monotonic()

    def fetch_summary(self, node: str) -> str:
        """`12.3 GB at 410 MB/s` for one node's download so far."""
        fetched = self.fetched.get(node, 0)
        began_at, began_bytes = self.first_seen.get(node, (self.last_moved, fetched))
        seconds = max(self.last_moved - began_at, 1e-6)
        rate = (fetched - began_bytes) / seconds / 1e6
        return f"{fetched / 1024**3:.1f} GB at {rate:.0f} MB/s"


async def watch_download(
    fleet: Any, node: str, path: str, progress: StartProgress, trace: Trace
) -> None:
    """Follow a node's download of the weights; every byte that arrives counts as progress."""
    try:
        stream = fleet.client(node).stream("download.watch", {"path": path, "interval_s": 2})
    except (LlmgwError, AgentLost):
        return
    try:
        async for event in stream:
            fetched = int(event.get("bytes") or 0)
            if fetched and fetched != progress.fetched.get(node, 0):
                if node not in progress.fetched:
                    trace.add("fetch began", node, path)
                    progress.first_seen[node] = (time.monotonic(), fetched)
                progress.fetched[node] = fetched
                progress.moved()
    except (LlmgwError, AgentLost):
        return
    finally:
        with contextlib.suppress(LlmgwError, AgentLost):
            await stream.cancel()


class _Failed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _wait_ready(
    fleet: Any,
    reach: EngineReach,
    started: list[tuple[str, str, int]],
    spec: Mapping[str, Any],
    timeout_s: float,
    trace: Trace,
    fetch_path: str | None = None,
) -> None:
    """Until rank 0's health answers; raises `_Failed` with the reason otherwise.

    The startup timeout runs from the last time anything moved: a process
    starting, a node's download of the weights growing (`fetch_path`, watched
    with the agent's `download.watch`), health answering.
    """
    head, port, path = spec["head"], int(spec["http_port"]), str(spec["health_path"])
    progress = StartProgress()
    watchers = [
        asyncio.ensure_future(watch_download(fleet, node, fetch_path, progress, trace))
        for node, _shard, _rank in started
        if fetch_path is not None
    ]
    try:
        await _poll_ready(fleet, reach, started, head, port, path, timeout_s, trace, progress)
    finally:
        for watcher in watchers:
            watcher.cancel()
        for watcher in watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    for node in progress.fetched:
        trace.add("fetch ended", node, progress.fetch_summary(node))


async def _poll_ready(
    fleet: Any,
    reach: EngineReach,
    started: list[tuple[str, str, int]],
    head: str,
    port: int,
    path: str,
    timeout_s: float,
    trace: Trace,
    progress: StartProgress,
) -> None:
    seen_running: set[str] = set()
    tunnel_refused: str | None = None
    answered = False
    port_open = False
    while True:
        for node, shard_id, rank in started:
            if fleet.snapshot().nodes[node].state != "ready":
                raise _Failed(
                    f"{node} (rank {rank}) was lost: {fleet.snapshot().nodes[node].reason}"
                )
            try:
                answer = await fleet.request(node, "shard.list", timeout_s=REQUEST_TIMEOUT_S)
            except (LlmgwError, AgentLost) as exc:
                raise _Failed(f"{node} (rank {rank}) stopped answering: {exc}") from None
            record = next(
                (s for s in answer.get("shards", []) if s.get("shard_id") == shard_id), None
            )
            if record is None:
                raise _Failed(f"rank {rank}'s shard on {node} is gone")
            phase = record.get("phase")
            if phase in ("exited", "failed", "stopped"):
                why = record.get("reason") or f"exit code {record.get('exit_code')}"
                raise _Failed(f"rank {rank} on {node} {phase}: {why}")
            if phase == "running" and shard_id not in seen_running:
                seen_running.add(shard_id)
                progress.moved()
                trace.add("process running", node)
            if node == head and rank == 0 and record.get("healthy"):
                if tunnel_refused:
                    trace.add("health answered on the node", node, f"no tunnel: {tunnel_refused}")
                    return
                if answered:
                    # The agent agrees: every console's `replicas` now says ready too.
                    return
        if len(seen_running) == len(started) and not tunnel_refused and not answered:
            try:
                status = await health_status(reach, head, port, path)
                if status is not None and not port_open:
                    port_open = True
                    trace.add("port open", head, f"port {port}, health {status}")
                    progress.moved()
                if status == 200:
                    trace.add("health answered", head, f"port {port} through an SSH tunnel")
                    answered = True
                    progress.moved()
            except TunnelRefused as exc:
                tunnel_refused = exc.sentence()
        if time.monotonic() - progress.last_moved > timeout_s:
            raise _Failed(f"nothing moved for {timeout_s:g} s (startup timeout)")
        await asyncio.sleep(POLL_S)


async def _start(
    fleet: Any, name: str, launch: Any, replica: dict[str, Any], trace: Trace
) -> list[tuple[str, str, int]]:
    """Start every shard in the launch's order; on `busy` stop what started and re-raise."""
    started: list[tuple[str, str, int]] = []
    for shard in launch.shards:
        args = shard.start_args(name, spec=shard_spec(replica, shard))
        try:
            answer = await fleet.request(
                shard.node, "shard.start", args, timeout_s=REQUEST_TIMEOUT_S
            )
        except (AgentError, AgentLost, LlmgwError):
            await asyncio.gather(*(stop_shard(fleet, n, s, forget=True) for n, s, _ in started))
            raise
        started.append((shard.node, str(answer["shard_id"]), shard.rank))
        trace.add(
            "claimed, process started",
            shard.node,
            f"rank {shard.rank} on {', '.join(shard.gpus) or 'its RAM'}",
        )
    return started


async def serve(
    fleet: Any, reach: EngineReach, request: ServeRequest, model: ModelInfo
) -> ServeOutcome:
    """Serve `model` on the fleet as `request` asks; see the module docstring.

    Raises:
        BadInput: a name already running, a forced layout that cannot work.
        DoesNotFit: nothing fits (or nothing the operator fixed).
    """
    shape = model.shape or next((a.shape for a in model.artifacts if a.shape), None)
    context = request.context or (shape.max_context if shape else None)
    if context is None:
        raise BadInput(
            f"{request.model}: the trained context is unknown", "give `context:` in tokens"
        )
    name = request.name or replica_name(model.repo_id or model.ref)
    listings = await shard_listings(fleet)
    for view in assemble(listings, fleet.snapshot()):
        if view.name == name and view.phase not in ("stopped", "failed"):
            raise BadInput(
                f"a replica named {name!r} already runs ({view.phase})",
                "give another `name`, or stop it first",
            )
    if any(r.get("replica") == name for records in listings.values() for r in records):
        await stop_replica(fleet, name)  # the records of an old, ended replica of that name
    views = await fleet_views(fleet)
    the_plan = plan(
        model,
        planner_fleet(views),
        format=request.format,
        context=context,
        concurrency=request.concurrency,
    )
    ways = choices(
        the_plan, model, planner_fleet(views), request.overrides, fallbacks=request.fallbacks
    )
    outcome = ServeOutcome(name=name, phase="failed")
    served_name = model.repo_id or name
    models = tuple(x for x in (model.repo_id, model.ref, request.source) if x)
    for attempt, choice in enumerate(ways, start=1):
        outcome.choice = choice
        record = await serve_way(
            fleet, reach, request, choice, name, served_name, models, context, attempt, outcome
        )
        outcome.attempts.append(record)
        if record["outcome"] in ("ready", "started"):
            outcome.phase = "ready" if record["outcome"] == "ready" else "starting"
            outcome.reason = None
            return outcome
        outcome.reason = record["reason"]
        outcome.exit_code = record.get("exit_code", 1)
    return outcome


async def serve_way(
    fleet: Any,
    reach: EngineReach,
    request: ServeRequest,
    choice: Choice,
    name: str,
    served_name: str,
    models: tuple[str, ...],
    context: int,
    attempt: int,
    outcome: ServeOutcome,
    heals: int = 0,
) -> dict[str, Any]:
    """One way: placed, started, watched; a lost race for cards is placed again.

    Returns:
        `{way, outcome: ready | started | failed | no room, reason, last_lines?, exit_code?}`.
    """
    trace = outcome.trace
    specs = {s.name: s for s in fleet.inventory.node_specs()}
    for _race in range(RACE_RETRIES):
        views = await fleet_views(fleet)
        want = choice.want(models)
        placement = place(want, views)
        if placement is None:
            reasons = want_summary(explain(want, views))
            trace.add("no room", None, f"{choice.label}: {reasons}")
            return {
                "way": choice.label,
                "outcome": "no room",
                "reason": f"no room for {choice.label} now: {reasons}",
                "exit_code": 3,
            }
        outcome.placement = placement.as_dict()
        nodes = [p.node for p in placement.nodes]
        trace.add("placed", None, f"{choice.label} on {', '.join(nodes)}")
        if request.source and Path(request.source).exists():
            for node in nodes:
                done = await copy_to_node(reach, node, request.source)
                trace.add(f"weights {done}", node, request.source)
        listings = await shard_listings(fleet)
        http_ports, rendezvous = _ports(fleet, nodes, listings)
        snapshot = fleet.snapshot()
        facts = {n: snapshot.nodes[n].facts for n in nodes}
        launch = build_launch(
            launch_request(
                choice,
                placement,
                specs,
                facts,
                served_name=served_name,
                context=context,
                concurrency=request.concurrency,
                http_ports=http_ports,
                rendezvous_port=rendezvous if len(nodes) > 1 else None,
                extra_env=request.env,
                secret_env=request.secret_env,
                source=request.source,
            )
        )
        replica = replica_spec(
            name=name,
            model=request.model,
            served_name=served_name,
            choice=choice,
            placement=placement,
            plan=launch,
            context=context,
            env=request.env,
            created_at=time.time(),
            attempt=attempt,
        )
        replica["rendezvous_port"] = rendezvous if len(nodes) > 1 else None
        replica["heals"] = heals
        # What placing it again needs, for a console that never saw this serve.
        replica["request"] = {
            "choice": asdict(choice),
            "concurrency": request.concurrency,
            "source": request.source,
            "hub_repo": request.hub_repo,
            "timeout_s": request.startup_timeout_s,
            "models": list(models),
            "env": dict(request.env),
        }
        try:
            started = await _start(fleet, name, launch, replica, trace)
        except AgentError as exc:
            if exc.code == "busy":
                trace.add("lost a race for cards", None, exc.message)
                continue
            return {"way": choice.label, "outcome": "failed", "reason": exc.sentence()}
        except (AgentLost, LlmgwError) as exc:
            return {"way": choice.label, "outcome": "failed", "reason": exc.sentence()}
        if not request.wait_ready:
            return {"way": choice.label, "outcome": "started", "reason": None}
        try:
            fetch_path = (
                hub_cache_dir(request.hub_repo)
                if request.hub_repo and not any(p.holds_model for p in placement.nodes)
                else None
            )
            await _wait_ready(
                fleet, reach, started, replica, request.startup_timeout_s, trace, fetch_path
            )
        except _Failed as failed:
            trace.add("failed", None, failed.reason)
            lines = await _last_lines(fleet, started)
            await asyncio.gather(*(stop_shard(fleet, n, s, forget=False) for n, s, _ in started))
            return {
                "way": choice.label,
                "outcome": "failed",
                "reason": failed.reason,
                "last_lines": lines,
            }
        return {"way": choice.label, "outcome": "ready", "reason": None}
    return {
        "way": choice.label,
        "outcome": "failed",
        "reason": f"lost the race for cards {RACE_RETRIES} times: other consoles keep taking them",
    }
