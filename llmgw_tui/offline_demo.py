"""The demo fleet's snapshot built offline: the same facts `--demo` shows, with no SSH.

Each demo node's hardware profile is written by the simulator, read back by
the real agent's discovery and validated by the core's facts model — the path
the live demo takes, minus the SSH servers — so tests and screenshots show
exactly what `llmgw-tui --demo` shows, deterministically.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from llmgw_agent.discover import collect_facts
from llmgw_agent.sim.profiles import write_profile
from llmgw_core.facts import parse_facts
from llmgw_core.fleet.demo import demo_nodes
from llmgw_core.fleet.state import FleetState, NodeState

FROZEN_AT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
"""The one moment every offline snapshot is taken at (no clocks in pictures)."""


def offline_demo_state(root: Path) -> tuple[FleetState, dict[str, tuple[str, ...]]]:
    """Every demo node ready with the facts its agent would report, and its inventory fabrics.

    Args:
        root: An empty folder for the capture directories.
    """
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
