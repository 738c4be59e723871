"""Replicas reassembled from what the nodes run, and the phase each is in (pure).

The console keeps nothing durable: every shard carries its replica's spec
(`shard.start`'s opaque `spec`), and a replica is whatever shards of one name
the nodes report now. So any console, started any time, sees the same
replicas — and decides the same phase from the same rules:

* every shard stopped → `stopped`;
* a shard failed or exited, a shard missing from a node that answers, or a
  node unreachable past its grace → `failed` (a node lost fails the whole
  replica: the other ranks would hang on their next collective);
* a node unreachable within its grace → `unreachable`;
* otherwise `starting` until every process runs, `loading` until rank 0's
  health answers, then `ready`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from llmgw_core.engines.spec import host_port
from llmgw_core.errors import LlmgwError
from llmgw_core.fleet.state import FleetState

TERMINAL = ("exited", "failed", "stopped")
SPEC_KIND = "llmgw-replica"
STARTUP_GRACE_S = 120.0
"""A replica younger than this may still be missing shards: its console is starting them."""


@dataclass(frozen=True)
class ShardView:
    """One shard as its node reports it."""

    node: str
    rank: int
    shard_id: str
    gpus: tuple[str, ...]
    phase: str
    healthy: bool | None = None
    served: bool = False
    """Whether its health ever answered (sticky, unlike `healthy`)."""
    reason: str | None = None
    exit_code: int | None = None
    started_at: float | None = None
    age_s: float | None = None
    """How long ago it was started, on its node's monotonic clock (None: an older agent)."""
    running_at: float | None = None
    ended_at: float | None = None
    draining_since: float | None = None
    """When a roll marked it draining (its gateways take it out of rotation)."""
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    adapters: tuple[Mapping[str, Any], ...] | None = None
    """The LoRA adapters its engine holds since a runtime change (`shard.adapters`); None: the
    ones it was started with."""

    @property
    def over(self) -> bool:
        """True once the shard has ended (exited, failed or stopped)."""
        return self.phase in TERMINAL

    def as_dict(self) -> dict[str, Any]:
        """The shard as the `replicas` step gives it."""
        return {
            "node": self.node,
            "rank": self.rank,
            "shard_id": self.shard_id,
            "gpus": list(self.gpus),
            "phase": self.phase,
            "healthy": self.healthy,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "env": dict(self.env),
            "argv": list(self.argv),
        }


@dataclass(frozen=True)
class ReplicaView:
    """A replica reassembled from its shards.

    Attributes:
        name: the replica's name (the agents' `replica`).
        spec: the replica's spec as it was started (model, engine, way, placement).
        shards: the shards found, rank order.
        phase: starting | loading | ready | unreachable | failed | stopped.
        reason: why it failed or waits, None when ready.
        transports: per shard id, the NCCL transport read from its log
            (`replica_transport.transport_dict`; None where NCCL said nothing);
            empty until `replica_transport.with_transport` reads them.
        transport_warnings: a sentence per problem with that transport (Socket
            between nodes, an adapter outside the fabric).
        figures: what rank 0's engine printed of its memory while it started
            (`engines.startup_lines`); empty until `serve.figures.with_figures` reads them.
        figure_warnings: a sentence per figure the engine got that the plan fixed otherwise.
    """

    name: str
    spec: Mapping[str, Any]
    shards: tuple[ShardView, ...]
    phase: str
    reason: str | None = None
    transports: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    transport_warnings: tuple[str, ...] = ()
    figures: Mapping[str, Any] = field(default_factory=dict)
    figure_warnings: tuple[str, ...] = ()

    @property
    def head(self) -> ShardView | None:
        """Rank 0's shard, when it is found."""
        return next((s for s in self.shards if s.rank == 0), None)

    @property
    def endpoint(self) -> str | None:
        """`node:port` of rank 0's HTTP server."""
        head = self.spec.get("head")
        port = self.spec.get("http_port")
        return f"{head}:{port}" if head and port else None

    @property
    def http_host(self) -> str:
        """The address rank 0's engine is reached at on its node (a replica of an older
        console, which bound every address, says nothing: the loopback)."""
        value = self.spec.get("http_host")
        return value if isinstance(value, str) and value else "127.0.0.1"

    @property
    def tls_cert(self) -> str | None:
        """The certificate rank 0's engine serves HTTPS with (PEM), which every caller pins;
        None for a replica whose engine speaks plain HTTP (one started by an older console)."""
        value = self.spec.get("tls_cert")
        return value if isinstance(value, str) and value else None

    @property
    def api_key_env(self) -> str | None:
        """The operator's variable holding the key its engines demand (None: they demand none)."""
        value = self.spec.get("api_key_env")
        return value if isinstance(value, str) and value else None

    @property
    def service(self) -> str | None:
        """The service this replica belongs to (`apply` started it), None for one served by hand."""
        label = self.spec.get("service")
        name = label.get("name") if isinstance(label, Mapping) else None
        return name if isinstance(name, str) and name else None

    @property
    def role(self) -> str | None:
        """`prefill` or `decode` for a worker of a disaggregated service; None: it does both."""
        return worker_role(self.spec)

    @property
    def draining(self) -> bool:
        """True once a roll marked it draining: gateways send it nothing new."""
        return any(shard.draining_since is not None for shard in self.shards)

    @property
    def adapters(self) -> tuple[dict[str, Any], ...]:
        """The LoRA adapters rank 0's engine holds now: `{name, source, lora_id}` each, as a
        runtime change recorded them, else as it was started with them."""
        head = min(self.shards, key=lambda s: s.rank, default=None)
        if head is not None and head.adapters is not None:
            return tuple(dict(a) for a in head.adapters)
        sources: dict[str, tuple[str, str | None]] = {}
        lora = (
            (self.spec.get("request") or {}).get("lora")
            if isinstance(self.spec.get("request"), Mapping)
            else None
        )
        if isinstance(lora, Mapping):
            sources = {
                str(a.get("name")): (
                    str(a.get("source")),
                    a.get("origin") if isinstance(a.get("origin"), str) else None,
                )
                for a in lora.get("adapters") or ()
                if isinstance(a, Mapping)
            }
        found = []
        for entry in self.spec.get("adapters") or ():
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                lora_id = entry.get("lora_id")
                source, origin = sources.get(entry["name"], ("", None))
                found.append(
                    {
                        "name": entry["name"],
                        "source": source,
                        "origin": origin,
                        "lora_id": lora_id if isinstance(lora_id, int) else None,
                    }
                )
        return tuple(found)

    @property
    def created_at(self) -> float:
        """When its console started it (0 for a spec that does not say)."""
        return _number(self.spec.get("created_at")) or 0.0

    def ready_engine(self) -> tuple[str, int, str]:
        """Rank 0's node, HTTP port and served name, for asking or measuring the engine.

        Raises:
            LlmgwError: the replica is not ready (naming its phase and why).
        """
        head, port = self.spec.get("head"), self.spec.get("http_port")
        if self.phase != "ready" or not head or not isinstance(port, int):
            raise LlmgwError(
                f"{self.name} is {self.phase}, not ready: {self.reason or 'wait for it'}"
            )
        return str(head), port, str(self.spec.get("served_name") or self.name)

    def pinned_engine(self) -> tuple[str, str, str | None]:
        """Rank 0's engine as a caller on its node reaches it: its URL (`https://` when it
        has a certificate), its served name, and the certificate to pin (None: plain HTTP).

        Raises:
            LlmgwError: the replica is not ready (naming its phase and why).
        """
        _head, port, served_name = self.ready_engine()
        cert = self.tls_cert
        url = f"{'https' if cert else 'http'}://{host_port(self.http_host, port)}"
        return url, served_name, cert

    def live_shards(self) -> tuple[ShardView, ...]:
        """The shards still running (what a stop must end)."""
        return tuple(s for s in self.shards if not s.over)

    def as_dict(self) -> dict[str, Any]:
        """The replica as the `replicas` step gives it."""
        return {
            "name": self.name,
            "model": self.spec.get("model"),
            "served_name": self.spec.get("served_name"),
            "phase": self.phase,
            "reason": self.reason,
            "engine": self.spec.get("engine"),
            "endpoint": self.endpoint,
            "http_host": self.http_host,
            "api_key_env": self.api_key_env,
            "tls_cert": self.tls_cert,
            "service": self.service,
            "role": self.role,
            "draining": self.draining,
            "adapters": [{"name": a["name"], "source": a["source"]} for a in self.adapters],
            "engine_args": dict(self.spec.get("engine_args") or {}),
            "way": self.spec.get("way", {}).get("label"),
            "fabric": self.spec.get("fabric"),
            "nvlink_domain": self.spec.get("nvlink_domain"),
            "slurm": dict(self.spec["slurm"]) if self.spec.get("slurm") else None,
            "shards": [
                {**s.as_dict(), "transport": self.transports.get(s.shard_id)} for s in self.shards
            ],
            "transport_warnings": list(self.transport_warnings),
            "figures": dict(self.figures),
            "figure_warnings": list(self.figure_warnings),
        }


def worker_role(spec: Mapping[str, Any]) -> str | None:
    """The side a replica's spec records (`PdLaunch.recorded`), None for one doing both."""
    pd = spec.get("pd")
    return str(pd.get("role")) if isinstance(pd, Mapping) and pd.get("role") else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def shard_view(node: str, record: Mapping[str, Any]) -> ShardView:
    """A shard from one record of an agent's `shard.list`."""
    spec = record.get("spec") or {}
    launch = spec.get("launch") or {}
    return ShardView(
        node=node,
        rank=int(record.get("rank") or 0),
        shard_id=str(record.get("shard_id")),
        gpus=tuple(str(g) for g in record.get("gpus") or ()),
        phase=str(record.get("phase") or "starting"),
        healthy=record.get("healthy"),
        served=bool(record.get("served") or record.get("healthy")),
        reason=record.get("reason"),
        exit_code=record.get("exit_code"),
        started_at=record.get("started_at"),
        age_s=record.get("age_s"),
        running_at=record.get("running_at"),
        ended_at=record.get("ended_at"),
        draining_since=_number(record.get("draining_since")),
        adapters=_adapter_records(record.get("adapters")),
        argv=tuple(launch.get("argv") or ()),
        env=dict(launch.get("env") or {}),
    )


def _adapter_records(value: Any) -> tuple[Mapping[str, Any], ...] | None:
    """A shard's runtime adapters as its node lists them; None when it never changed them."""
    if not isinstance(value, list):
        return None
    return tuple(
        entry for entry in value if isinstance(entry, dict) and isinstance(entry.get("name"), str)
    )


def _silent_s(state: Any, now_s: float, now_monotonic: float) -> float:
    """How long a node has not answered: on the monotonic clock when it was stamped so."""
    if state is None:
        return float("inf")
    if state.last_seen_monotonic is not None:
        return now_monotonic - state.last_seen_monotonic
    return now_s - (state.last_seen.timestamp() if state.last_seen else 0.0)


def _phase(
    spec: Mapping[str, Any],
    shards: Sequence[ShardView],
    snapshot: FleetState,
    now_s: float,
    grace_s: float,
    now_monotonic: float,
) -> tuple[str, str | None]:
    expected = {int(n["rank"]): n["node"] for n in spec.get("placement", {}).get("nodes", [])}
    by_rank = {s.rank: s for s in shards}
    every_rank = set(by_rank) >= set(expected)
    if shards and every_rank and all(s.phase == "stopped" for s in shards):
        return "stopped", None
    for shard in shards:
        if shard.phase in ("failed", "exited"):
            why = shard.reason or f"exit code {shard.exit_code}"
            return "failed", f"rank {shard.rank} on {shard.node} {shard.phase}: {why}"
    ages = [s.age_s for s in shards if s.age_s is not None]
    # Ages come from the nodes' monotonic clocks; the wall clock only for older agents.
    age = min(ages) if ages else now_s - float(spec.get("created_at") or 0)
    young = age < STARTUP_GRACE_S
    waiting = None
    for rank, node in sorted(expected.items()):
        state = snapshot.nodes.get(node)
        if rank in by_rank and state is not None and state.state == "ready":
            continue
        if state is None or state.state != "ready":
            why = f"{node} is {state.state if state else 'gone from the inventory'}"
            if state is not None and state.reason:
                why += f" ({state.reason})"
            if _silent_s(state, now_s, now_monotonic) > grace_s:
                return "failed", f"rank {rank}'s node was lost: {why}"
            waiting = f"rank {rank}'s node does not answer: {why}"
            continue
        if not young:
            return "failed", f"rank {rank}'s shard on {node} is gone"
        waiting = waiting or f"rank {rank} on {node} is not started yet"
    if any(s.phase == "stopped" for s in shards):
        stopped = next(s for s in shards if s.phase == "stopped")
        return "failed", f"rank {stopped.rank} on {stopped.node} was stopped"
    if waiting and "does not answer" in waiting:
        return "unreachable", waiting
    if waiting or any(s.phase == "starting" for s in shards):
        return "starting", waiting
    head = by_rank.get(0)
    if head is not None and head.healthy:
        return "ready", None
    return "loading", "rank 0's health does not answer yet"


def superseded(listings: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[tuple[str, str]]:
    """`(node, shard_id)` of every live shard of an attempt a newer one of its name replaced.

    A node lost under a replica keeps running its shard; once the replica was
    placed again elsewhere, that shard holds cards for nothing when the node
    comes back.
    """
    newest: dict[str, float] = {}
    found: list[tuple[str, str, str, float]] = []
    for node, records in listings.items():
        for record in records:
            spec = record.get("spec") or {}
            if spec.get("kind") != SPEC_KIND:
                continue
            name = str(record.get("replica"))
            created = float((spec.get("replica") or {}).get("created_at") or 0)
            newest[name] = max(newest.get(name, 0.0), created)
            if record.get("phase") not in TERMINAL:
                found.append((node, str(record.get("shard_id")), name, created))
    return [(node, shard_id) for node, shard_id, name, created in found if created < newest[name]]


def assemble(
    listings: Mapping[str, Sequence[Mapping[str, Any]]],
    snapshot: FleetState,
    *,
    now: datetime | None = None,
    grace_s: float = 60.0,
    now_monotonic: float | None = None,
) -> tuple[ReplicaView, ...]:
    """Every replica the nodes' shard listings hold, oldest first.

    Args:
        listings: per node that answered, its `shard.list` records.
        snapshot: the fleet now (which nodes answer, since when they do not).
        now: the moment judged (default: now).
        grace_s: how long a node may not answer before its replica is failed.
        now_monotonic: the moment judged on the monotonic clock (default: now).
    """
    now_s = (now or datetime.now(UTC)).timestamp()
    now_monotonic = time.monotonic() if now_monotonic is None else now_monotonic
    found_by: dict[str, list[tuple[float, ShardView]]] = {}
    specs: dict[str, Mapping[str, Any]] = {}
    for node, records in listings.items():
        for record in records:
            spec = record.get("spec") or {}
            if spec.get("kind") != SPEC_KIND:
                continue  # a shard some other tool started: not a replica of ours
            name = str(record.get("replica"))
            replica = spec.get("replica") or {}
            created = float(replica.get("created_at") or 0)
            found_by.setdefault(name, []).append((created, shard_view(node, record)))
            if created >= float(specs.get(name, {}).get("created_at") or 0):
                specs[name] = replica
    # Only the newest attempt of a name counts: a fallback replaces the way that failed.
    shards = {
        name: [
            shard
            for created, shard in found
            if created == float(specs[name].get("created_at") or 0)
        ]
        for name, found in found_by.items()
    }
    views = []
    for name, found in shards.items():
        found.sort(key=lambda s: (s.rank, -(s.started_at or 0)))
        latest: dict[int, ShardView] = {}
        for shard in found:
            latest.setdefault(shard.rank, shard)
        ranked = tuple(latest[rank] for rank in sorted(latest))
        spec = specs[name]
        phase, reason = _phase(spec, ranked, snapshot, now_s, grace_s, now_monotonic)
        views.append(ReplicaView(name=name, spec=spec, shards=ranked, phase=phase, reason=reason))
    views.sort(key=lambda v: (float(v.spec.get("created_at") or 0), v.name))
    return tuple(views)


def _at(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds")


def trace_of(view: ReplicaView) -> list[dict[str, Any]]:
    """The start of a replica, step by step and node by node, with times (from its records)."""
    steps: list[tuple[float, str | None, str, str | None]] = []
    created = view.spec.get("created_at")
    if created:
        steps.append((float(created), None, "placed", view.spec.get("way", {}).get("label")))
    for shard in view.shards:
        if shard.started_at:
            steps.append(
                (
                    shard.started_at,
                    shard.node,
                    "claimed, process started",
                    ", ".join(shard.gpus) or "RAM",
                )
            )
        if shard.running_at:
            steps.append((shard.running_at, shard.node, "process running", None))
        if shard.ended_at:
            steps.append((shard.ended_at, shard.node, shard.phase, shard.reason))
    steps.sort(key=lambda step: step[0])
    return [
        {"at": _at(at), "node": node, "step": name, "detail": detail}
        for at, node, name, detail in steps
    ]
