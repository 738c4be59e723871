"""Replicas reassembled from the nodes' shard listings: the phase every console agrees on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from llmgw_core.fleet.state import FleetState, NodeState
from llmgw_core.serve.view import SPEC_KIND, assemble, trace_of

NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
CREATED = (NOW - timedelta(minutes=10)).timestamp()


def _spec(created: float = CREATED, nodes=("a", "b")) -> dict:
    return {
        "name": "llama",
        "model": "meta-llama/Llama-3.3-70B-Instruct",
        "served_name": "meta-llama/Llama-3.3-70B-Instruct",
        "engine": "vllm",
        "head": nodes[0],
        "http_port": 8000,
        "created_at": created,
        "way": {"label": "2 nodes × 8 × h100-80g"},
        "placement": {
            "nodes": [{"node": n, "rank": r, "gpus": ["0"]} for r, n in enumerate(nodes)]
        },
    }


def _shard(rank: int, phase: str = "running", healthy=None, spec=None, **extra) -> dict:
    return {
        "shard_id": f"llama-r{rank}-x",
        "replica": "llama",
        "rank": rank,
        "gpus": [str(i) for i in range(8)],
        "phase": phase,
        "healthy": healthy,
        "started_at": CREATED + 1,
        "spec": {
            "kind": SPEC_KIND,
            "replica": spec or _spec(),
            "launch": {"argv": ["vllm", "serve"], "env": {}},
        },
        **extra,
    }


def _fleet(**states: str) -> FleetState:
    nodes = {
        name: NodeState(
            name=name, state=states.get(name, "ready"), last_seen=NOW - timedelta(seconds=30)
        )
        for name in ("a", "b")
    }
    return FleetState(taken_at=NOW, nodes=nodes)


def test_a_replica_whose_rank_0_answers_health_is_ready():
    (view,) = assemble({"a": [_shard(0, healthy=True)], "b": [_shard(1)]}, _fleet(), now=NOW)
    assert view.phase == "ready" and view.reason is None
    assert view.endpoint == "a:8000"
    assert [s.node for s in view.shards] == ["a", "b"]


def test_a_replica_still_loading_says_so():
    (view,) = assemble({"a": [_shard(0, healthy=False)], "b": [_shard(1)]}, _fleet(), now=NOW)
    assert view.phase == "loading"


def test_a_failed_shard_fails_the_replica_with_its_reason():
    listing = {
        "a": [_shard(0, healthy=True)],
        "b": [_shard(1, phase="failed", reason="CUDA out of memory")],
    }
    (view,) = assemble(listing, _fleet(), now=NOW)
    assert view.phase == "failed"
    assert view.reason == "rank 1 on b failed: CUDA out of memory"
    assert [s.node for s in view.live_shards()] == ["a"]


def test_a_node_lost_past_its_grace_fails_the_replica():
    (view,) = assemble(
        {"a": [_shard(0, healthy=True)]}, _fleet(b="unreachable"), now=NOW, grace_s=10
    )
    assert view.phase == "failed"
    assert view.reason == "rank 1's node was lost: b is unreachable"


def test_a_node_silent_within_its_grace_is_only_unreachable():
    (view,) = assemble(
        {"a": [_shard(0, healthy=True)]}, _fleet(b="unreachable"), now=NOW, grace_s=60
    )
    assert view.phase == "unreachable"


def test_a_shard_gone_from_a_node_that_answers_fails_an_old_replica_not_a_young_one():
    (old,) = assemble({"a": [_shard(0, healthy=True)], "b": []}, _fleet(), now=NOW)
    assert old.phase == "failed" and old.reason == "rank 1's shard on b is gone"
    young = _spec(created=NOW.timestamp() - 1)
    (starting,) = assemble({"a": [_shard(0, spec=young)], "b": []}, _fleet(), now=NOW)
    assert starting.phase == "starting"


def test_every_shard_stopped_is_a_stopped_replica():
    listing = {"a": [_shard(0, phase="stopped")], "b": [_shard(1, phase="stopped")]}
    (view,) = assemble(listing, _fleet(), now=NOW)
    assert view.phase == "stopped"


def test_only_the_newest_attempt_of_a_name_counts():
    old = _spec(created=CREATED - 100)
    new = _spec(created=CREATED, nodes=("b",))
    listing = {
        "a": [_shard(0, phase="failed", spec=old, reason="boom")],
        "b": [_shard(1, phase="stopped", spec=old), _shard(0, healthy=True, spec=new)],
    }
    (view,) = assemble(listing, _fleet(), now=NOW)
    assert view.phase == "ready" and [s.node for s in view.shards] == ["b"]


def test_shards_of_other_tools_are_not_replicas():
    foreign = {"shard_id": "x", "replica": "x", "rank": 0, "phase": "running", "spec": {}}
    assert assemble({"a": [foreign]}, _fleet(), now=NOW) == ()


def test_the_trace_lists_placed_started_and_running_in_time_order():
    (view,) = assemble(
        {"a": [_shard(0, healthy=True, running_at=CREATED + 2)], "b": [_shard(1)]},
        _fleet(),
        now=NOW,
    )
    steps = [(s["node"], s["step"]) for s in trace_of(view)]
    assert steps[0] == (None, "placed")
    assert ("a", "process running") in steps
    assert trace_of(view)[0]["at"].startswith("2026-11-29T08:50:00")


def _healable(spec: dict) -> dict:
    return {**spec, "request": {"choice": {}, "models": []}}


def test_a_replica_that_served_and_lost_a_node_is_placed_again_but_not_one_that_never_came_up():
    from llmgw_core.serve.heal import MAX_HEALS, heal_candidates

    served = _healable(_spec())
    lost = {"a": [_shard(0, phase="stopped", healthy=True, spec=served)]}
    (view,) = assemble(lost, _fleet(b="unreachable"), now=NOW, grace_s=0)
    assert [v.name for v in heal_candidates([view])] == ["llama"]

    never = {"a": [_shard(0, phase="stopped", healthy=False, spec=served)]}
    (view,) = assemble(never, _fleet(b="unreachable"), now=NOW, grace_s=0)
    assert heal_candidates([view]) == []

    still = {"a": [_shard(0, healthy=True, spec=served)]}
    (view,) = assemble(still, _fleet(b="unreachable"), now=NOW, grace_s=0)
    assert heal_candidates([view]) == []  # rank 0 still holds its cards: reconcile stops it first

    tired = _healable({**_spec(), "heals": MAX_HEALS})
    (view,) = assemble(
        {"a": [_shard(0, phase="stopped", healthy=True, spec=tired)]},
        _fleet(b="unreachable"),
        now=NOW,
        grace_s=0,
    )
    assert heal_candidates([view]) == []
