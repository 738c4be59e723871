"""Time to build placement's view of a 1,000-node live fleet, place a replica and explain it.

The nodes' facts are the demo's own (written by the simulator, read by the
real discovery), copied under 1,000 names: 400 HGX H100 on two fabrics, 540
GB200 trays of one NVLink domain, and MIG, L40S and CPU nodes. Run:
`.venv/bin/python tests/benchmarks/bench_placement.py`. Not collected by pytest.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from llmgw_agent.discover import collect_facts
from llmgw_agent.sim.profiles import write_profile
from llmgw_core.facts import parse_facts
from llmgw_core.fleet.sim.demo import demo_nodes
from llmgw_core.fleet.state import FleetState, NodeState
from llmgw_core.inventory import Fabric, NodeSpec
from llmgw_core.placement import Want, explain, place
from llmgw_core.planner.pools_live import live_nodes

AT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
COPIES = {"h100-a-01": 400, "gb200-r1-t01": 540, "a100-mig-01": 20, "l40s-01": 20, "cpu-01": 20}


def fleet(root: Path) -> tuple[FleetState, list[NodeSpec]]:
    """1,000 nodes made of the demo's facts."""
    facts = {}
    for node in demo_nodes():
        if node.name in COPIES:
            capture = write_profile(
                node.profile, root / node.name, hostname=node.name, **node.options
            )
            facts[node.name] = parse_facts(collect_facts(replay=str(capture)), node.name)
    states: dict[str, NodeState] = {}
    specs = []
    hcas = tuple(f"mlx5_{i}" for i in range(8))
    for source, count in COPIES.items():
        for index in range(count):
            name = f"{source}-{index:04d}"
            states[name] = NodeState(name=name, state="ready", facts=facts[source], last_seen=AT)
            fabrics = ()
            if source == "h100-a-01":
                fabrics = (Fabric(name="ib-a" if index % 2 else "ib-b", hcas=hcas),)
            specs.append(NodeSpec(name=name, host="10.0.0.1", fabrics=fabrics))
    return FleetState(taken_at=AT, nodes=states), specs


def timed(label: str, action, runs: int = 5) -> None:
    """Print the median time of `runs` calls of `action`."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    print(f"{label:<58} {statistics.median(times) * 1000:8.1f} ms")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        snapshot, specs = fleet(Path(folder))
    claims = {f"h100-a-01-{i:04d}": {"0": "busy", "1": "busy"} for i in range(0, 400, 3)}
    views = live_nodes(snapshot, specs, claims)
    print(f"{len(views)} nodes")
    timed("views from facts and claims (1,000 nodes)", lambda: live_nodes(snapshot, specs, claims))
    timed("place 4 × h100-80g", lambda: place(Want("h100-80g", 4), views))
    timed(
        "place 2 nodes × 8 h100-80g on one fabric",
        lambda: place(Want("h100-80g", 8, nodes=2), views),
    )
    timed(
        "place 16 trays × 4 gb200-186g in one NVLink domain",
        lambda: place(Want("gb200-186g", 4, nodes=16), views),
    )
    timed(
        "explain 2 nodes × 8 h100-80g, node by node",
        lambda: explain(Want("h100-80g", 8, nodes=2), views),
    )


if __name__ == "__main__":
    main()
