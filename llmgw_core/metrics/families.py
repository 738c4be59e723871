"""The Prometheus families llmgw exports, built from one snapshot (pure).

Names follow Prometheus conventions: an `llmgw_` prefix, base units
(`_bytes`, `_ratio`, `_bytes_per_second`, `_timestamp_seconds`: `promtool check
metrics` finds nothing to say), and one-hot
gauges (`llmgw_node_state{state=...}`) where a thing is in one of a few
states, so an alert reads `== 1` instead of matching strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from llmgw_core.facts import Card, NodeFacts, RailVerdict
from llmgw_core.fleet.state import FleetState
from llmgw_core.serve.view import ReplicaView, ShardView

MIB_BYTES = 1024 * 1024
GBPS_BYTES_PER_S = 1e9 / 8
NODE_STATES = ("connecting", "ready", "unreachable", "refused")
REPLICA_PHASES = ("starting", "loading", "ready", "unreachable", "failed", "stopped")
RAIL_VERDICTS = ("pass", "warn", "fail")
"""The verdicts a node keeps (a TCP-only `untested` rail is not kept)."""
NVLINK_OUTSIDE = ("not-joined",)
"""Card fabric verdicts of a card that takes no part in its NVLink domain."""
NVLINK_DEGRADED = ("degraded", "unhealthy")


@dataclass(frozen=True)
class MetricsSnapshot:
    """Everything one scrape shows, gathered beforehand (a scrape never waits on SSH).

    Attributes:
        fleet: the fleet at one moment (its facts carry the fabric verdicts the nodes keep).
        replicas: the replicas reassembled from the nodes' shards at about that moment.
        gateways: families already scraped from the gateways and relabelled.
        gateway_up: per (gateway, node), whether its metrics port answered the last scrape.
    """

    fleet: FleetState
    replicas: tuple[ReplicaView, ...] = ()
    gateways: tuple[Metric, ...] = ()
    gateway_up: Mapping[tuple[str, str], bool] = field(default_factory=dict)
    scale_events: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Per service, its scale events so far by direction (`out`, `in`), as the lease node
    counts them (`service.counts`)."""


def _gauge(name: str, documentation: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


def node_families(fleet: FleetState) -> list[Metric]:
    """Per node: up (its agent answers), its state one-hot, when it last answered."""
    up = _gauge("llmgw_node_up", "1 when the node's agent answers the console.", ["node"])
    state = _gauge(
        "llmgw_node_state",
        "1 for the state the node is in (connecting, ready, unreachable, refused).",
        ["node", "state"],
    )
    seen = _gauge(
        "llmgw_node_last_seen_timestamp_seconds",
        "When the node's agent last answered (Unix time).",
        ["node"],
    )
    for node in fleet.nodes.values():
        up.add_metric([node.name], 1.0 if node.state == "ready" else 0.0)
        for name in NODE_STATES:
            state.add_metric([node.name, name], 1.0 if node.state == name else 0.0)
        if node.last_seen is not None:
            seen.add_metric([node.name], node.last_seen.timestamp())
    taken = _gauge(
        "llmgw_snapshot_timestamp_seconds", "When the exported fleet snapshot was taken.", []
    )
    taken.add_metric([], fleet.taken_at.timestamp())
    return [up, state, seen, taken]


def _cards(fleet: FleetState) -> Iterable[tuple[str, NodeFacts, Card]]:
    for node in fleet.nodes.values():
        if node.facts is not None:
            for card in node.facts.cards:
                yield node.name, node.facts, card


def card_families(fleet: FleetState) -> list[Metric]:
    """Per card: memory used and total, utilisation, NVLink domain membership; per node IMEX."""
    labels = ["node", "gpu"]
    info = _gauge(
        "llmgw_gpu_info", "1 per card, naming its class and model.", [*labels, "class", "name"]
    )
    used = _gauge("llmgw_gpu_memory_used_bytes", "Memory in use on the card.", labels)
    total = _gauge("llmgw_gpu_memory_total_bytes", "The card's memory.", labels)
    busy = _gauge("llmgw_gpu_utilization_ratio", "The card's compute utilisation, 0 to 1.", labels)
    joined = _gauge(
        "llmgw_gpu_nvlink_joined",
        "1 when the card takes part in its multi-node NVLink domain (cards with one only).",
        labels,
    )
    degraded = _gauge(
        "llmgw_gpu_nvlink_degraded",
        "1 when the card is in its NVLink domain but degraded or unhealthy.",
        labels,
    )
    for node, _facts, card in _cards(fleet):
        key = [node, str(card.index)]
        info.add_metric([*key, card.gpu_class, card.name], 1.0)
        if card.memory_used_mib is not None:
            used.add_metric(key, card.memory_used_mib * MIB_BYTES)
        if card.memory_mib is not None:
            total.add_metric(key, card.memory_mib * MIB_BYTES)
        if card.utilization_pct is not None:
            busy.add_metric(key, card.utilization_pct / 100)
        verdict = card.fabric.verdict if card.fabric is not None else None
        if verdict is not None and verdict != "local":
            joined.add_metric(key, 0.0 if verdict in NVLINK_OUTSIDE else 1.0)
            degraded.add_metric(key, 1.0 if verdict in NVLINK_DEGRADED else 0.0)
    imex = _gauge("llmgw_imex_up", "1 when the node's IMEX daemon reports its domain UP.", ["node"])
    for node in fleet.nodes.values():
        if node.facts is not None and node.facts.imex is not None:
            state = (node.facts.imex.state or "").upper()
            imex.add_metric([node.name], 1.0 if state == "UP" else 0.0)
    return [info, used, total, busy, joined, degraded, imex]


def shard_ready(shard: ShardView) -> bool:
    """A shard is ready when its process runs and, for rank 0, its health route answers."""
    return shard.phase == "running" and (shard.rank != 0 or shard.healthy is True)


def replica_families(replicas: Sequence[ReplicaView]) -> list[Metric]:
    """Replicas by phase; per replica its phase, its shards and how many are ready."""
    by_phase = _gauge("llmgw_replicas", "How many replicas are in each phase.", ["phase"])
    counts = {phase: 0 for phase in REPLICA_PHASES}
    for view in replicas:
        counts[view.phase] = counts.get(view.phase, 0) + 1
    for phase, count in counts.items():
        by_phase.add_metric([phase], float(count))
    phase = _gauge(
        "llmgw_replica_phase",
        "1 for the phase each replica is in.",
        ["replica", "model", "engine", "phase"],
    )
    shards = _gauge("llmgw_replica_shards", "The replica's shards (one per node).", ["replica"])
    ready = _gauge(
        "llmgw_replica_ready_shards",
        "The replica's shards whose process runs (and, for rank 0, answers its health route).",
        ["replica"],
    )
    for view in replicas:
        model = str(view.spec.get("model") or "")
        engine = str(view.spec.get("engine") or "")
        for name in counts:
            phase.add_metric([view.name, model, engine, name], 1.0 if view.phase == name else 0.0)
        expected = len(view.spec.get("placement", {}).get("nodes", [])) or len(view.shards)
        shards.add_metric([view.name], float(expected))
        ready.add_metric([view.name], float(sum(1 for s in view.shards if shard_ready(s))))
    return [by_phase, phase, shards, ready]


def service_families(
    replicas: Sequence[ReplicaView], scale_events: Mapping[str, Mapping[str, int]]
) -> list[Metric]:
    """Per service: its replicas that run (neither failed nor stopped), its scale events."""
    running = _gauge(
        "llmgw_service_replicas",
        "The service's replicas that run (starting, loading, ready or unreachable).",
        ["service"],
    )
    counts: dict[str, int] = {}
    for view in replicas:
        if view.service is not None:
            live = view.phase not in ("failed", "stopped")
            counts[view.service] = counts.get(view.service, 0) + (1 if live else 0)
    for service in sorted(set(counts) | set(scale_events)):
        running.add_metric([service], float(counts.get(service, 0)))
    events = CounterMetricFamily(
        "llmgw_service_scale_events",
        "Replicas `keep` added (out) or removed (in) on the service's signals.",
        labels=["service", "direction"],
    )
    for service in sorted(scale_events):
        for direction in ("out", "in"):
            events.add_metric([service, direction], float(scale_events[service].get(direction, 0)))
    return [running, events]


def _rail_verdicts(fleet: FleetState) -> Iterable[tuple[str, RailVerdict]]:
    """Each node's kept verdicts, by peer and adapter (the agent keeps one per pair)."""
    for node in fleet.nodes.values():
        if node.facts is not None:
            for kept in sorted(node.facts.rail_verdicts, key=lambda v: (v.peer, v.adapter)):
                yield node.name, kept


def fabric_families(fleet: FleetState) -> list[Metric]:
    """The fabric verdicts every node keeps, per peer and adapter: verdict one-hot, speeds, when.

    Read from the nodes' facts (`rail_verdicts`), so a test run by any console
    or script shows here; each rail shows on both of its ends. `rail` is the
    adapter's position in its fabric, empty when the test did not know it.
    """
    labels = ["node", "peer", "adapter", "rail"]
    verdict = _gauge(
        "llmgw_fabric_rail_verdict",
        "1 for the last verdict of each rail end the node keeps (pass, warn, fail).",
        [*labels, "verdict"],
    )
    ratio = _gauge(
        "llmgw_fabric_rail_ratio", "Measured over rated speed of each rail, last test.", labels
    )
    measured = _gauge(
        "llmgw_fabric_rail_measured_bytes_per_second",
        "Each rail's measured speed (a 400 Gb/s rail is 5e10 bytes a second).",
        labels,
    )
    rated = _gauge(
        "llmgw_fabric_rail_rated_bytes_per_second",
        "Each rail's rated speed, in bytes a second.",
        labels,
    )
    when = _gauge(
        "llmgw_fabric_rail_measured_timestamp_seconds",
        "When each rail's last verdict was measured (Unix time).",
        labels,
    )
    for node, kept in _rail_verdicts(fleet):
        key = [node, kept.peer, kept.adapter, "" if kept.rail is None else str(kept.rail)]
        for name in RAIL_VERDICTS:
            verdict.add_metric([*key, name], 1.0 if kept.verdict == name else 0.0)
        if kept.ratio is not None:
            ratio.add_metric(key, kept.ratio)
        if kept.measured_gbps is not None:
            measured.add_metric(key, kept.measured_gbps * GBPS_BYTES_PER_S)
        if kept.rated_gbps is not None:
            rated.add_metric(key, kept.rated_gbps * GBPS_BYTES_PER_S)
        when.add_metric(key, kept.measured_at)
    return [verdict, ratio, measured, rated, when]


def gateway_families(snapshot: MetricsSnapshot) -> list[Metric]:
    """Whether each gateway's metrics answered, then the gateways' own families, relabelled."""
    up = _gauge(
        "llmgw_gateway_up",
        "1 when the gateway's Prometheus port answered the last scrape through SSH.",
        ["gateway", "node"],
    )
    for (gateway, node), answered in sorted(snapshot.gateway_up.items()):
        up.add_metric([gateway, node], 1.0 if answered else 0.0)
    return [up, *snapshot.gateways]


def all_families(snapshot: MetricsSnapshot) -> list[Metric]:
    """Every family of one snapshot, in a stable order."""
    return [
        *node_families(snapshot.fleet),
        *card_families(snapshot.fleet),
        *replica_families(snapshot.replicas),
        *service_families(snapshot.replicas, snapshot.scale_events),
        *fabric_families(snapshot.fleet),
        *gateway_families(snapshot),
    ]
