"""Console tests run over the demo fleet's facts built offline (`llmgw_tui.offline_demo`)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from llmgw_core.fleet.state import FleetState
from llmgw_core.replica_view import SPEC_KIND, ReplicaView, assemble
from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import StaticFeed
from llmgw_tui.offline_demo import offline_demo_state


@pytest.fixture(scope="session")
def demo_state(tmp_path_factory: pytest.TempPathFactory) -> tuple[FleetState, dict]:
    """The demo fleet as a snapshot, built once per test session."""
    return offline_demo_state(tmp_path_factory.mktemp("demo-captures"))


@pytest.fixture(autouse=True)
def _deterministic_terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """NO_COLOR would grey out every snapshot; animation stays off."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("LLMGW_ANIMATION", "none")
    yield


@pytest.fixture
def make_app(demo_state):
    """A factory of consoles over the demo snapshot; pass a changed FleetState to vary it."""

    def factory(state: FleetState | None = None) -> LlmgwApp:
        fleet_state, fabrics = demo_state
        return LlmgwApp(StaticFeed(state or fleet_state, fabrics), animation="none")

    return factory


SOCKET_LOG = "nccl-debug-info_all_reduce_perf_a100-sxm4-80gb_2gpu_container_socket-fallback.txt"
"""A real NCCL run that fell back to NET/Socket (read in place from the shared fixtures)."""


def two_node_replica(fleet_state: FleetState) -> ReplicaView:
    """A ready two-node vLLM replica on the demo's HGX H100 nodes, as the agents list it.

    The records are shaped as `shard.list` answers them (`replica_view.assemble`
    reads them), with fixed times and ports so snapshots never move.
    """
    placement = {
        "nodes": [
            {"node": "h100-a-01", "rank": 0, "gpus": [f"GPU-{i}" for i in range(8)]},
            {"node": "h100-a-02", "rank": 1, "gpus": [f"GPU-{i}" for i in range(8)]},
        ]
    }
    replica = {
        "name": "llama-405b",
        "model": "catalog:meta-llama/Meta-Llama-3.1-405B",
        "served_name": "meta-llama/Meta-Llama-3.1-405B",
        "engine": "vllm",
        "way": {"label": "2 × 8 × h100-80g"},
        "placement": placement,
        "fabric": "ib-a",
        "head": "h100-a-01",
        "http_port": 8000,
        "created_at": 1_800_000_000.0,
    }
    listings = {
        entry["node"]: [
            {
                "shard_id": f"llama-405b-r{entry['rank']}",
                "replica": "llama-405b",
                "rank": entry["rank"],
                "gpus": entry["gpus"],
                "phase": "running",
                "healthy": entry["rank"] == 0,
                "started_at": 1_800_000_001.0,
                "spec": {"kind": SPEC_KIND, "replica": replica, "launch": {"argv": ["vllm"]}},
            }
        ]
        for entry in placement["nodes"]
    }
    (view,) = assemble(listings, fleet_state, now=datetime.fromtimestamp(1_800_000_030.0, UTC))
    return view


@pytest.fixture
def replica_app(demo_state, hardware_dir):
    """A console over the demo snapshot running one replica whose log is a real NCCL run."""
    fleet_state, fabrics = demo_state
    view = two_node_replica(fleet_state)
    log_lines = (hardware_dir / SOCKET_LOG).read_text().splitlines()
    logs = {shard.shard_id: log_lines[:60] for shard in view.shards}

    def factory() -> LlmgwApp:
        feed = StaticFeed(fleet_state, fabrics, replicas=[view], logs=logs)
        return LlmgwApp(feed, animation="none")

    return factory
