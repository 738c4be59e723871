"""The families built from one snapshot of plain values: what a scrape would show."""

from __future__ import annotations

from datetime import UTC, datetime

from llmgw_core.facts import NodeFacts
from llmgw_core.fleet.state import FleetState, NodeState
from llmgw_core.metrics.families import (
    MetricsSnapshot,
    all_families,
    fabric_families,
    replica_families,
    service_families,
)
from llmgw_core.serve.view import ReplicaView, ShardView

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _values(families, name: str) -> dict[tuple, float]:
    (family,) = [f for f in families if f.name == name]
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples}


def _shard(node: str, rank: int, phase: str, healthy: bool | None) -> ShardView:
    return ShardView(
        node=node, rank=rank, shard_id=f"s{rank}", gpus=("0",), phase=phase, healthy=healthy
    )


def _replica(name: str, phase: str, *shards: ShardView) -> ReplicaView:
    placement = {"nodes": [{"node": s.node, "rank": s.rank} for s in shards]}
    spec = {"model": "m", "engine": "vllm", "placement": placement}
    return ReplicaView(name=name, spec=spec, shards=shards, phase=phase)


def test_a_loading_replica_counts_its_head_as_not_ready_until_its_health_answers():
    loading = _replica(
        "a", "loading", _shard("n1", 0, "running", False), _shard("n2", 1, "running", None)
    )
    ready = _replica("b", "ready", _shard("n3", 0, "running", True))
    families = replica_families([loading, ready])
    assert _values(families, "llmgw_replica_ready_shards") == {
        (("replica", "a"),): 1.0,
        (("replica", "b"),): 1.0,
    }
    assert _values(families, "llmgw_replica_shards")[(("replica", "a"),)] == 2.0
    phases = _values(families, "llmgw_replicas")
    assert phases[(("phase", "loading"),)] == 1 and phases[(("phase", "ready"),)] == 1
    assert phases[(("phase", "failed"),)] == 0


def _node(name: str, *verdicts: dict) -> NodeState:
    facts = NodeFacts.model_validate(
        {
            "agent_version": "1",
            "source": "nvml",
            "host": {"hostname": name},
            "rail_verdicts": list(verdicts),
        }
    )
    return NodeState(name=name, state="ready", last_seen=AT, facts=facts)


def test_each_node_exports_the_verdicts_it_keeps_per_peer_and_adapter_with_when_they_were_measured():
    measured_at = AT.timestamp() - 3600
    slow = {
        "peer": "b",
        "adapter": "mlx5_5",
        "rail": 5,
        "verdict": "fail",
        "ratio": 0.6,
        "measured_gbps": 240.0,
        "rated_gbps": 400.0,
        "measured_at": measured_at,
    }
    fleet = FleetState(
        taken_at=AT,
        nodes={
            "a": _node("a", slow),
            "b": _node("b", {**slow, "peer": "a", "adapter": "mlx5_4", "rail": 4}),
        },
    )
    families = fabric_families(fleet)
    on_a = (("adapter", "mlx5_5"), ("node", "a"), ("peer", "b"), ("rail", "5"))
    on_b = (("adapter", "mlx5_4"), ("node", "b"), ("peer", "a"), ("rail", "4"))
    verdicts = _values(families, "llmgw_fabric_rail_verdict")
    assert {labels for labels, value in verdicts.items() if value == 1} == {
        (*on_a, ("verdict", "fail")),
        (*on_b, ("verdict", "fail")),
    }
    assert verdicts[(*on_a, ("verdict", "pass"))] == 0
    assert _values(families, "llmgw_fabric_rail_ratio") == {on_a: 0.6, on_b: 0.6}
    assert _values(families, "llmgw_fabric_rail_measured_bytes_per_second")[on_a] == 240e9 / 8
    assert _values(families, "llmgw_fabric_rail_rated_bytes_per_second")[on_b] == 400e9 / 8
    assert _values(families, "llmgw_fabric_rail_measured_timestamp_seconds") == {
        on_a: measured_at,
        on_b: measured_at,
    }


def test_a_verdict_kept_without_its_rail_position_or_speeds_has_an_empty_rail_and_no_speed():
    kept = {"peer": "b", "adapter": "mlx5_0", "verdict": "pass", "measured_at": 1.7e9}
    fleet = FleetState(taken_at=AT, nodes={"a": _node("a", kept), "b": _node("b")})
    families = fabric_families(fleet)
    end = (("adapter", "mlx5_0"), ("node", "a"), ("peer", "b"), ("rail", ""))
    assert _values(families, "llmgw_fabric_rail_verdict")[(*end, ("verdict", "pass"))] == 1
    assert _values(families, "llmgw_fabric_rail_ratio") == {}
    assert _values(families, "llmgw_fabric_rail_measured_bytes_per_second") == {}
    assert _values(families, "llmgw_fabric_rail_measured_timestamp_seconds") == {end: 1.7e9}


def test_a_refused_node_is_down_and_a_card_without_a_load_figure_has_no_utilisation_sample():
    facts = NodeFacts.model_validate(
        {
            "agent_version": "1",
            "source": "nvml",
            "host": {"hostname": "n1"},
            "cards": [
                {"index": 0, "name": "NVIDIA H100", "class": "h100-80g", "memory_mib": 81559},
            ],
        }
    )
    fleet = FleetState(
        taken_at=AT,
        nodes={
            "n1": NodeState(name="n1", state="ready", last_seen=AT, facts=facts),
            "n2": NodeState(name="n2", state="refused", reason="its host key changed"),
        },
    )
    families = all_families(MetricsSnapshot(fleet=fleet))
    assert _values(families, "llmgw_node_up") == {(("node", "n1"),): 1.0, (("node", "n2"),): 0.0}
    assert _values(families, "llmgw_node_state")[(("node", "n2"), ("state", "refused"))] == 1
    card = (("gpu", "0"), ("node", "n1"))
    assert _values(families, "llmgw_gpu_memory_total_bytes") == {card: 81559 * 2**20}
    assert _values(families, "llmgw_gpu_utilization_ratio") == {}
    assert _values(families, "llmgw_gpu_nvlink_joined") == {}  # no multi-node domain
    assert _values(families, "llmgw_snapshot_timestamp_seconds") == {(): AT.timestamp()}
    assert _values(families, "llmgw_fabric_rail_verdict") == {}  # no node keeps a verdict


def test_a_services_replicas_and_scale_events_are_counted_from_their_labels():
    def labelled(name: str, service: str | None, phase: str) -> ReplicaView:
        spec = {"model": "m", "engine": "vllm", "service": {"name": service} if service else None}
        return ReplicaView(name=name, spec=spec, shards=(), phase=phase)

    replicas = [
        labelled("chat-1", "chat", "ready"),
        labelled("chat-2", "chat", "loading"),
        labelled("chat-3", "chat", "failed"),
        labelled("by-hand", None, "ready"),
    ]
    families = service_families(replicas, {"chat": {"out": 3, "in": 2}, "code": {"out": 1}})
    assert _values(families, "llmgw_service_replicas") == {
        (("service", "chat"),): 2.0,
        (("service", "code"),): 0.0,
    }
    events = _values(families, "llmgw_service_scale_events")
    assert events[(("direction", "out"), ("service", "chat"))] == 3.0
    assert events[(("direction", "in"), ("service", "code"))] == 0.0
