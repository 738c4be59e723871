"""A clock jump at the console: how long a node was silent, how old a start is, never from the wall.

`assemble` is given the moment it judges as both clocks read it; the wall
clock two hours ahead of the monotonic one is what a console whose clock was
stepped (NTP, `date -s`) reads.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from llmgw_core.fleet.state import FleetState, NodeState
from llmgw_core.serve.view import SPEC_KIND, assemble

TRUE_NOW = datetime.now(UTC)
JUMPED_NOW = TRUE_NOW + timedelta(hours=2)
MONOTONIC_NOW = time.monotonic()


def _spec(created: float) -> dict:
    return {
        "name": "llama",
        "engine": "vllm",
        "head": "a",
        "created_at": created,
        "placement": {"nodes": [{"node": n, "rank": r, "gpus": ["0"]} for r, n in enumerate("ab")]},
    }


def _shard(rank: int, *, age_s: float, created: float, healthy: bool = True) -> dict:
    return {
        "shard_id": f"llama-r{rank}-x",
        "replica": "llama",
        "rank": rank,
        "gpus": ["0"],
        "phase": "running",
        "healthy": healthy,
        "age_s": age_s,
        "spec": {"kind": SPEC_KIND, "replica": _spec(created), "launch": {}},
    }


def _fleet(b_state: str, silent_s: float) -> FleetState:
    seen = TRUE_NOW - timedelta(seconds=silent_s)
    nodes = {
        "a": NodeState(
            name="a", state="ready", last_seen=TRUE_NOW, last_seen_monotonic=MONOTONIC_NOW
        ),
        "b": NodeState(
            name="b",
            state=b_state,
            last_seen=seen,
            last_seen_monotonic=MONOTONIC_NOW - silent_s,
        ),
    }
    return FleetState(taken_at=TRUE_NOW, nodes=nodes)


def test_a_node_silent_for_a_second_is_only_unreachable_when_the_consoles_clock_jumped_ahead():
    created = (TRUE_NOW - timedelta(minutes=10)).timestamp()
    listings = {"a": [_shard(0, age_s=600, created=created)], "b": []}
    (view,) = assemble(
        listings, _fleet("unreachable", 1.0), now=JUMPED_NOW, now_monotonic=MONOTONIC_NOW
    )
    assert view.phase == "unreachable"
    assert view.reason == "rank 1's node does not answer: b is unreachable"


def test_a_node_silent_past_its_grace_on_the_monotonic_clock_fails_the_replica():
    created = (TRUE_NOW - timedelta(minutes=10)).timestamp()
    listings = {"a": [_shard(0, age_s=600, created=created)], "b": []}
    (view,) = assemble(
        listings, _fleet("unreachable", 90.0), now=TRUE_NOW, now_monotonic=MONOTONIC_NOW
    )
    assert view.phase == "failed"
    assert view.reason == "rank 1's node was lost: b is unreachable"


def test_a_replica_two_seconds_into_its_start_is_starting_when_the_consoles_clock_jumped_ahead():
    created = (TRUE_NOW - timedelta(seconds=2)).timestamp()
    listings = {"a": [_shard(0, age_s=2.0, created=created, healthy=False)], "b": []}
    (view,) = assemble(listings, _fleet("ready", 0.0), now=JUMPED_NOW, now_monotonic=MONOTONIC_NOW)
    assert view.phase == "starting"
    assert view.reason == "rank 1 on b is not started yet"


def test_a_replica_whose_shard_is_old_on_its_nodes_clock_and_misses_a_rank_is_failed():
    created = (TRUE_NOW - timedelta(seconds=2)).timestamp()  # a console's clock behind
    listings = {"a": [_shard(0, age_s=600.0, created=created)], "b": []}
    (view,) = assemble(listings, _fleet("ready", 0.0), now=TRUE_NOW, now_monotonic=MONOTONIC_NOW)
    assert view.phase == "failed"
    assert view.reason == "rank 1's shard on b is gone"
