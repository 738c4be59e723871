"""The demo fleet's facts, offline: written by the simulator, read by the real discovery.

Shared by the placement and replica tests (each folder's conftest makes it
the `demo_facts` fixture); built once per test session.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from llmgw_agent.discover import collect_facts
from llmgw_agent.sim.profiles import write_profile
from llmgw_core.facts import parse_facts
from llmgw_core.fleet.sim.demo import demo_nodes
from llmgw_core.fleet.state import FleetState, NodeState
from llmgw_core.inventory import Fabric, NodeSpec

AT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)

DemoFacts = tuple[FleetState, tuple[NodeSpec, ...]]

_BUILT: list[DemoFacts] = []


def _adapters(capture: Path) -> tuple[str, ...]:
    folder = capture / "sys" / "class" / "infiniband"
    return tuple(sorted(p.name for p in folder.iterdir())) if folder.is_dir() else ()


def demo_fleet_facts(tmp_path_factory: pytest.TempPathFactory) -> DemoFacts:
    """Every demo node ready, and inventory entries with the demo's fabrics (built once)."""
    if _BUILT:
        return _BUILT[0]
    root = tmp_path_factory.mktemp("demo-captures")
    nodes: dict[str, NodeState] = {}
    specs = []
    for node in demo_nodes():
        capture = write_profile(node.profile, root / node.name, hostname=node.name, **node.options)
        facts = parse_facts(collect_facts(replay=str(capture)), node.name)
        nodes[node.name] = NodeState(name=node.name, state="ready", facts=facts, last_seen=AT)
        fabrics = ()
        if node.fabric:
            fabrics = (Fabric(name=node.fabric, hcas=_adapters(capture)),)
        specs.append(
            NodeSpec(name=node.name, host="127.0.0.1", fabrics=fabrics, replay=str(capture))
        )
    _BUILT.append((FleetState(taken_at=AT, nodes=nodes), tuple(specs)))
    return _BUILT[0]


def on_two_fabrics(specs: tuple[NodeSpec, ...]) -> list[NodeSpec]:
    """The demo's inventory with `h100-a-02` moved to a fabric of its own (`ib-b`, same
    adapters): the H100 pair then shares no interconnect."""
    return [
        s.model_copy(update={"fabrics": (Fabric(name="ib-b", hcas=s.fabrics[0].hcas),)})
        if s.name == "h100-a-02"
        else s
        for s in specs
    ]
