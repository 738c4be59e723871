"""Serving a replica on the live fleet: plan, place, claim, start, and watch it come up.

`serve` is plan → place → claim → start → ready:

* the plan's ways, narrowed or forced by the operator (`replica_choice`),
  tried in order (the fallbacks);
* placement on the fleet as it is now (`placement.place`), free cards only —
  the agents' claims say which are taken;
* `shard.start` on each node claims its cards atomically: when another
  console won a card first the agent answers `busy`, the shards already
  started are stopped, and the replica is placed again on what is left;
  an engine that could not bind its port (another process took it after
  `port.free` found it free) is stopped and started again on fresh ports;
* ready when rank 0's HTTP health answers through an SSH tunnel (never a
  log line); failed when a shard ends, a node is lost, or nothing moved for
  the startup timeout — with the reason and the last lines of every shard.

The dry run, `preview_serve(fleet, request, model) -> ServePreview`
(from `replica_prepare`, re-exported here), decides exactly what `serve`
would — the way, the nodes and cards, each command's argv and environment
(secrets `***`), the health URL, the fallbacks — and claims or starts
nothing. `ServePreview.as_dict()` is the `serve` step's `dry_run: true`.
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from llmgw_agent.ops import Op
from llmgw_core.cancelling import cancel_and_wait
from llmgw_core.engines.spec import PdLaunch
from llmgw_core.errors import LlmgwError
from llmgw_core.fleet.client import AgentError, AgentLost
from llmgw_core.model.source import ModelInfo, split_ref
from llmgw_core.placement import Placement, explain, place, want_summary
from llmgw_core.serve.adapters import is_local
from llmgw_core.serve.choice import Choice
from llmgw_core.serve.fetch import FetchFailed, fetch_weights, weights_plan
from llmgw_core.serve.http import ClientTls, EngineReach, TunnelRefused, engine_tls, health_status
from llmgw_core.serve.launch import replica_spec, shard_spec
from llmgw_core.serve.preflight import all_reduce_preflight
from llmgw_core.serve.prepare import (
    STARTUP_TIMEOUT_S,
    ServePreview,
    ServeRequest,
    launch_for,
    preview_serve,
    rail_choice,
    resolve,
)
from llmgw_core.serve.progress import StartProgress, Trace, hub_cache_dir, watch_download
from llmgw_core.serve.replicas import (
    REQUEST_TIMEOUT_S,
    fleet_views,
    shard_lines,
    shard_listings,
    stop_replica,
    stop_shard,
)
from llmgw_core.serve.weights import copy_to_node

__all__ = [
    "STARTUP_TIMEOUT_S",
    "ServeOutcome",
    "ServePreview",
    "ServeRequest",
    "StartProgress",
    "Trace",
    "hub_cache_dir",
    "preview_serve",
    "serve",
    "serve_way",
    "watch_download",
]

RACE_RETRIES = 6
POLL_S = 0.5
LAST_LINES = 20


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
    warnings: list[str] = field(default_factory=list)

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
            "warnings": self.warnings,
        }


# --- serving ----------------------------------------------------------------------------


async def _last_lines(fleet: Any, shards: list[tuple[str, str, int]]) -> dict[str, list[str]]:
    kept: dict[str, list[str]] = {}
    for node, shard_id, rank in shards:
        try:
            kept[f"r{rank} {node}"] = await shard_lines(fleet, node, shard_id, LAST_LINES)
        except (LlmgwError, AgentLost) as exc:
            kept[f"r{rank} {node}"] = [f"(its lines cannot be read: {exc})"]
    return kept


_BIND_FAILED = (
    "address already in use",  # uvicorn (vLLM, SGLang, llama-cpp-python): errno 98
    "couldn't bind http server socket",  # llama-server
)


def port_taken(last_lines: Mapping[str, list[str]]) -> str | None:
    """Which shard could not bind its port, from its last engine lines (None: none said so)."""
    for shard, lines in last_lines.items():
        for line in reversed(lines):
            if any(said in line.lower() for said in _BIND_FAILED):
                return (
                    f"{shard} could not bind its port (address already in use): "
                    "something else listens on it there"
                )
    return None


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
    host = str(spec.get("http_host") or "127.0.0.1")
    tls = engine_tls(spec.get("tls_cert"))
    progress = StartProgress()
    watchers = [
        asyncio.ensure_future(watch_download(fleet, node, fetch_path, progress, trace))
        for node, _shard, _rank in started
        if fetch_path is not None
    ]
    try:
        await _poll_ready(
            fleet, reach, started, head, port, path, timeout_s, trace, progress, host=host, tls=tls
        )
    finally:
        await cancel_and_wait(*watchers)
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
    *,
    host: str = "127.0.0.1",
    tls: ClientTls | None = None,
) -> None:
    seen_running: set[str] = set()
    tunnel_refused: str | None = None
    answered = False
    port_open = False

    def stalled() -> None:
        if time.monotonic() - progress.last_moved > timeout_s:
            raise _Failed(f"nothing moved for {timeout_s:g} s (startup timeout)")

    while True:
        # Judged before a poll as well as after it: on a loaded machine one poll may span
        # the whole stall, and what it then sees (the health answering) must not hide it.
        stalled()
        for node, shard_id, rank in started:
            if fleet.snapshot().nodes[node].state != "ready":
                raise _Failed(
                    f"{node} (rank {rank}) was lost: {fleet.snapshot().nodes[node].reason}"
                )
            try:
                answer = await fleet.request(node, Op.SHARD_LIST, timeout_s=REQUEST_TIMEOUT_S)
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
                status = await health_status(reach, head, port, path, host, tls)
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
        stalled()
        await asyncio.sleep(POLL_S)


UNANSWERED_WAIT_S = 15.0
"""How long a serve waits for a node that lost a `shard.start`'s answer, to stop what it began."""


async def _stop_unanswered(fleet: Any, node: str, name: str, created_at: float) -> None:
    """Stop this attempt's shard on `node` if its start happened though its answer was lost.

    The SSH connection cut while `shard.start` ran: the agent may have claimed
    the cards and started the shard all the same. The node is asked again once
    it answers (for a while); a node that stays away is left to `reconcile`,
    which fails the replica once its startup grace is over.
    """
    deadline = time.monotonic() + UNANSWERED_WAIT_S
    while time.monotonic() < deadline:
        fleet.reconnect_now(node)
        try:
            answer = await fleet.request(node, Op.SHARD_LIST, timeout_s=REQUEST_TIMEOUT_S)
        except (LlmgwError, AgentLost):
            await asyncio.sleep(0.2)
            continue
        for record in answer.get("shards") or []:
            spec = (record.get("spec") or {}).get("replica") or {}
            if record.get("replica") == name and spec.get("created_at") == created_at:
                await stop_shard(fleet, node, str(record.get("shard_id")), forget=True)
        return


async def _start(
    fleet: Any, name: str, launch: Any, replica: dict[str, Any], trace: Trace
) -> list[tuple[str, str, int]]:
    """Start every shard in the launch's order; on `busy` stop what started and re-raise."""
    started: list[tuple[str, str, int]] = []
    for shard in launch.shards:
        args = shard.start_args(name, spec=shard_spec(replica, shard))
        try:
            answer = await fleet.request(
                shard.node, Op.SHARD_START, args, timeout_s=REQUEST_TIMEOUT_S
            )
        except (AgentError, AgentLost, LlmgwError) as exc:
            await asyncio.gather(*(stop_shard(fleet, n, s, forget=True) for n, s, _ in started))
            if not isinstance(exc, AgentError):  # no answer: it may have started all the same
                await _stop_unanswered(fleet, shard.node, name, replica["created_at"])
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
    resolved = await resolve(fleet, request, model)
    name = resolved.name
    listings = await shard_listings(fleet)
    if any(r.get("replica") == name for records in listings.values() for r in records):
        await stop_replica(fleet, name)  # the records of an old, ended replica of that name
    outcome = ServeOutcome(name=name, phase="failed")
    for attempt, choice in enumerate(resolved.ways, start=1):
        outcome.choice = choice
        record = await serve_way(
            fleet,
            reach,
            request,
            choice,
            name,
            resolved.served_name,
            resolved.models,
            resolved.context,
            attempt,
            outcome,
        )
        outcome.attempts.append(record)
        if record["outcome"] in ("ready", "started"):
            outcome.phase = "ready" if record["outcome"] == "ready" else "starting"
            outcome.reason = None
            return outcome
        outcome.reason = record["reason"]
        outcome.exit_code = record.get("exit_code", 1)
    return outcome


async def _preflight(
    fleet: Any,
    request: ServeRequest,
    choice: Choice,
    placement: Placement,
    served_name: str,
    context: int,
    trace: Trace,
) -> str | None:
    """all_reduce_perf across the chosen nodes; the reason to stop, or None to go on."""
    launch, _ = await launch_for(fleet, request, choice, placement, served_name, context)
    nodes = ", ".join(p.node for p in placement.nodes)
    trace.add("all_reduce began", None, nodes)
    try:
        judged = await all_reduce_preflight(fleet, placement, launch, choice.cards_per_node)
    except (LlmgwError, AgentLost) as exc:
        return f"all_reduce_perf could not run across {nodes}: {exc}"
    trace.add("all_reduce ended", None, f"{judged.verdict}: {judged.reason}")
    if judged.verdict == "fail":
        return f"all_reduce_perf across {nodes} failed: {judged.reason}"
    return None


async def _fetch(
    fleet: Any,
    reach: EngineReach,
    request: ServeRequest,
    nodes: list[str],
    trace: Trace,
    name: str,
    fetched: set[str],
) -> ServeRequest:
    """The weights on every node first; the request then loads them from where they are.

    `fetched` (updated here) holds the nodes that got them earlier in this serve.
    """
    assert request.hub_repo is not None
    snapshot = fleet.snapshot()
    facts = {n.name: n.facts for n in snapshot.ready()}
    specs = {s.name: s for s in fleet.inventory.node_specs()}
    weights = weights_plan(request.hub_repo, nodes, specs, facts)
    weights = replace(
        weights,
        present=tuple(n for n in nodes if n in weights.present or n in fetched),
        copy_from={n: s for n, s in weights.copy_from.items() if n not in fetched},
        download=tuple(n for n in weights.download if n not in fetched),
    )
    await fetch_weights(
        fleet,
        reach,
        weights,
        repo=request.hub_repo,
        revision=request.revision,
        token_env=request.secret_env,
        timeout_s=request.startup_timeout_s,
        trace=trace,
        replica=name,
    )
    fetched.update(nodes)
    return replace(request, source=weights.path) if weights.path else request


async def _fetch_adapters(
    fleet: Any, reach: EngineReach, request: ServeRequest, nodes: list[str], trace: Trace, name: str
) -> ServeRequest:
    """The Hub adapters on every node, by the base model's own path (a node's model directory,
    a neighbour's copy, or a download), then named by where they are: the engines load them
    from that path, never by fetching them themselves."""
    slots = request.lora
    if slots is None or all(is_local(a.source) for a in slots.adapters):
        return request
    snapshot = fleet.snapshot()
    facts = {n.name: n.facts for n in snapshot.ready()}
    specs = {s.name: s for s in fleet.inventory.node_specs()}
    placed = []
    for adapter in slots.adapters:
        if is_local(adapter.source):
            placed.append(adapter)
            continue
        repo, revision = split_ref(adapter.source)
        dirs = [d for d in specs[nodes[0]].model_dirs if d.startswith("/")]
        gguf_file = posixpath.join(dirs[0], repo, adapter.file) if adapter.file and dirs else None
        weights = weights_plan(repo, nodes, specs, facts, gguf_file=gguf_file)
        await fetch_weights(
            fleet,
            reach,
            weights,
            repo=repo,
            revision=revision,
            token_env=request.secret_env,
            timeout_s=request.startup_timeout_s,
            trace=trace,
            replica=name,
        )
        where = weights.path or repo
        if adapter.file:
            where = posixpath.join(where, adapter.file)
        trace.add("adapter fetched", None, f"{adapter.name}: {where}")
        placed.append(replace(adapter, source=where, origin=adapter.source))
    return replace(request, lora=replace(slots, adapters=tuple(placed)))


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
    *,
    placed: Placement | None = None,
    pd: PdLaunch | None = None,
) -> dict[str, Any]:
    """One way: placed, started, watched; a lost race for cards is placed again.

    `placed` fixes the placement (a worker of a disaggregated service, placed with the
    other side): a lost race for its cards is then `busy`, for the caller to place every
    worker again. `pd` makes it that worker (its side recorded in its spec).

    Returns:
        `{way, outcome: ready | started | failed | no room | busy, reason, last_lines?,
        exit_code?}`.
    """
    trace = outcome.trace
    fetched: set[str] = set()  # nodes given the weights already, should a race move the replica
    for race in range(RACE_RETRIES):
        views = await fleet_views(fleet)
        want = choice.want(models)
        placement = placed or place(want, views)
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
        if request.all_reduce and len(nodes) > 1:
            refused = await _preflight(
                fleet, request, choice, placement, served_name, context, trace
            )
            if refused is not None:
                return {"way": choice.label, "outcome": "failed", "reason": refused}
        if request.hub_repo and choice.artifact_format != "gguf":
            try:
                request = await _fetch(fleet, reach, request, nodes, trace, name, fetched)
            except FetchFailed as exc:
                trace.add("failed", None, exc.sentence())
                return {"way": choice.label, "outcome": "failed", "reason": exc.sentence()}
        if request.source and not request.hub_repo and Path(request.source).exists():
            for node in nodes:
                done = await copy_to_node(reach, node, request.source)
                trace.add(f"weights {done}", node, request.source)
        for adapter in request.lora.adapters if request.lora else ():
            if Path(adapter.source).exists():
                for node in nodes:
                    done = await copy_to_node(reach, node, adapter.source)
                    trace.add(f"adapter {done}", node, f"{adapter.name}: {adapter.source}")
        try:
            request = await _fetch_adapters(fleet, reach, request, nodes, trace, name)
        except FetchFailed as exc:
            trace.add("failed", None, exc.sentence())
            return {"way": choice.label, "outcome": "failed", "reason": exc.sentence()}
        rails = rail_choice(fleet, placement, all_rails=request.rails == "all")
        for warning in rails.warnings:
            trace.add("rails", None, warning)
            if warning not in outcome.warnings:
                outcome.warnings.append(warning)
        notes: list[str] = []
        launch, rendezvous = await launch_for(
            fleet, request, choice, placement, served_name, context, rails, notes, pd=pd
        )
        for note in notes:
            trace.add("cores", None, note)
            if note not in outcome.warnings:
                outcome.warnings.append(note)
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
        replica["rendezvous_port"] = rendezvous
        replica["heals"] = heals
        replica["api_key_env"] = request.api_key_env  # the variable's name, never its value
        if request.service is not None:
            replica["service"] = dict(request.service)
        if request.slurm is not None:
            replica["slurm"] = dict(request.slurm)
        # What placing it again needs, for a console that never saw this serve.
        replica["request"] = {
            "choice": asdict(choice),
            "concurrency": request.concurrency,
            "source": request.source,
            "hub_repo": request.hub_repo,
            "revision": request.revision,
            "timeout_s": request.startup_timeout_s,
            "models": list(models),
            "env": dict(request.env),
            "rails": request.rails,
            "api_key_env": request.api_key_env,
            "engine_args": dict(request.engine_args),
            "lora": request.lora.as_dict() if request.lora else None,
        }
        replica["engine_args"] = dict(request.engine_args)
        if pd is not None:
            replica["pd"] = pd.recorded()
        try:
            started = await _start(fleet, name, launch, replica, trace)
        except AgentError as exc:
            if exc.code == "busy" and placed is not None:
                trace.add("lost a race for cards", None, exc.message)
                return {"way": choice.label, "outcome": "busy", "reason": exc.message}
            if exc.code == "busy":
                trace.add("lost a race for cards", None, exc.message)
                continue
            return {"way": choice.label, "outcome": "failed", "reason": exc.sentence()}
        except (AgentLost, LlmgwError) as exc:
            return {"way": choice.label, "outcome": "failed", "reason": exc.sentence()}
        if not request.wait_ready:
            return {"way": choice.label, "outcome": "started", "reason": None}
        try:
            await _wait_ready(fleet, reach, started, replica, request.startup_timeout_s, trace)
        except _Failed as failed:
            trace.add("failed", None, failed.reason)
            lines = await _last_lines(fleet, started)
            taken = port_taken(lines)
            if taken is not None and race < RACE_RETRIES - 1:
                # Another process took the port between `port.free` and the engine's bind:
                # a lost race like one for cards; the next try asks for free ports again.
                await asyncio.gather(*(stop_shard(fleet, n, s, forget=True) for n, s, _ in started))
                trace.add("lost a race for its port", None, taken)
                continue
            await asyncio.gather(*(stop_shard(fleet, n, s, forget=False) for n, s, _ in started))
            return {
                "way": choice.label,
                "outcome": "failed",
                "reason": f"{failed.reason}; {taken}" if taken else failed.reason,
                "last_lines": lines,
            }
        return {"way": choice.label, "outcome": "ready", "reason": None}
    return {
        "way": choice.label,
        "outcome": "failed",
        "reason": f"lost the race for cards {RACE_RETRIES} times: other consoles keep taking them",
    }
