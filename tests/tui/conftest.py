"""The demo fleet's facts, built offline for deterministic console tests.

Each demo node's hardware profile is written by the simulator and read back
by the real agent's discovery (`collect_facts(replay=…)`), then validated by
the core's facts model — the same path the live demo takes, without SSH, so
every snapshot shows exactly what `llmgw-tui --demo` shows.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from llmgw_agent.discover import collect_facts
from llmgw_agent.sim.profiles import write_profile

from llmgw_core.facts import parse_facts
from llmgw_core.fleet.demo import demo_nodes
from llmgw_core.fleet.state import FleetState, NodeState
from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import StaticFeed

FROZEN_AT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def demo_fleet_state(root: Path) -> tuple[FleetState, dict[str, tuple[str, ...]]]:
    """Every demo node ready, with the facts its agent would report; and the inventory fabrics."""
    nodes: dict[str, NodeState] = {}
    fabrics: dict[str, tuple[str, ...]] = {}
    for node in demo_nodes():
        options = {"hostname": node.name, **node.options}  # as the live demo writes them
        capture = write_profile(node.profile, root / node.name, **options)
        facts = parse_facts(collect_facts(replay=str(capture)), node.name)
        nodes[node.name] = NodeState(
            name=node.name, address="127.0.0.1", state="ready", facts=facts, last_seen=FROZEN_AT
        )
        fabrics[node.name] = (node.fabric,) if node.fabric else ()
    return FleetState(taken_at=FROZEN_AT, nodes=nodes), fabrics


@pytest.fixture(scope="session")
def demo_state(tmp_path_factory: pytest.TempPathFactory) -> tuple[FleetState, dict]:
    """The demo fleet as a snapshot, built once per test session."""
    return demo_fleet_state(tmp_path_factory.mktemp("demo-captures"))


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
