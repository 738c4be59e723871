"""What one scrape of the metrics endpoint costs on a large fleet, and how big it is.

The demo's real facts (agent discovery over its simulated captures) are
copied to 1,000 nodes with 100 replicas, each node keeping the verdicts
of its 8 rails against the next (as a fabric test leaves them); the
endpoint is started on a loopback port and scraped over HTTP, as Prometheus
would. Prints the time to build the families, the time of a scrape and the
size of its answer. A scrape reads the latest snapshot only: nothing here
waits on SSH. Run: `.venv/bin/python tests/benchmarks/bench_metrics.py`.
An argument sets the node count (the demo's 23, say). Not collected by pytest.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import httpx

from llmgw_core.facts import RailVerdict
from llmgw_core.fleet.state import FleetState
from llmgw_core.metrics.exporter import SnapshotCollector, serve_metrics
from llmgw_core.metrics.families import MetricsSnapshot, all_families, fabric_families
from llmgw_core.serve.view import ReplicaView, ShardView
from llmgw_tui.offline_demo import offline_demo_state

NODES = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
REPLICAS = max(1, NODES // 10)
RAILS_PER_NODE = 8
ROUNDS = 20


def big_fleet() -> FleetState:
    """1,000 nodes, each a copy of one demo node's real facts, round robin."""
    with tempfile.TemporaryDirectory() as folder:
        demo, _fabrics = offline_demo_state(Path(folder))
    originals = list(demo.nodes.values())
    nodes = {}
    for index in range(NODES):
        node = originals[index % len(originals)]
        name = f"{node.name}-{index:04d}"
        nodes[name] = node.model_copy(update={"name": name})
    return FleetState(taken_at=demo.taken_at, nodes=nodes)


def replicas(fleet: FleetState) -> tuple[ReplicaView, ...]:
    names = list(fleet.nodes)
    views = []
    for index in range(REPLICAS):
        shards = tuple(
            ShardView(
                node=names[(2 * index + rank) % len(names)],
                rank=rank,
                shard_id=f"r{index}-{rank}",
                gpus=tuple(str(g) for g in range(8)),
                phase="running",
                healthy=True if rank == 0 else None,
            )
            for rank in range(2)
        )
        spec = {"model": "meta-llama/Llama-3.3-70B-Instruct", "engine": "vllm"}
        views.append(ReplicaView(name=f"replica-{index}", spec=spec, shards=shards, phase="ready"))
    return tuple(views)


def with_verdicts(fleet: FleetState) -> FleetState:
    """Each node keeps the verdicts of its 8 rails against the next node (what a test leaves)."""
    names = list(fleet.nodes)
    nodes = {}
    for index, (name, node) in enumerate(fleet.nodes.items()):
        peer = names[(index + 1) % len(names)]
        kept = tuple(
            RailVerdict(
                peer=peer,
                adapter=f"mlx5_{rail}",
                rail=rail,
                verdict="pass",
                ratio=0.97,
                measured_gbps=388.0,
                rated_gbps=400.0,
                measured_at=1.8e9,
            )
            for rail in range(RAILS_PER_NODE)
        )
        facts = node.facts.model_copy(update={"rail_verdicts": kept}) if node.facts else None
        nodes[name] = node.model_copy(update={"facts": facts})
    return fleet.model_copy(update={"nodes": nodes})


def main() -> None:
    fleet = with_verdicts(big_fleet())
    snapshot = MetricsSnapshot(fleet=fleet, replicas=replicas(fleet))
    cards = sum(len(n.facts.cards) for n in fleet.nodes.values() if n.facts)
    build_s = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        families = all_families(snapshot)
        build_s.append(time.perf_counter() - started)
    samples = sum(len(f.samples) for f in families)
    fabric_s = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        rails = fabric_families(fleet)
        fabric_s.append(time.perf_counter() - started)
    rail_samples = sum(len(f.samples) for f in rails)

    collector = SnapshotCollector()
    collector.update(snapshot)
    server = serve_metrics(collector, 0)
    first_s, again_s = [], []
    try:
        with httpx.Client(timeout=30) as client:
            for _ in range(ROUNDS // 2):
                collector.update(replace(snapshot))  # a new snapshot: families built anew
                for times in (first_s, again_s):
                    started = time.perf_counter()
                    body = client.get(server.url).content
                    times.append(time.perf_counter() - started)
    finally:
        server.stop()
    rails = NODES * RAILS_PER_NODE
    print(f"fleet: {NODES} nodes, {cards} cards, {REPLICAS} replicas, {rails} rail verdicts kept")
    print(f"families: {len(families)}, samples: {samples}")
    print(f"build families: median {statistics.median(build_s) * 1000:.1f} ms (wall)")
    print(
        f"of which fabric rails: {rail_samples} samples, "
        f"median {statistics.median(fabric_s) * 1000:.1f} ms"
    )
    print(f"scrape of a new snapshot: median {statistics.median(first_s) * 1000:.1f} ms")
    print(f"scrape of the same snapshot again: median {statistics.median(again_s) * 1000:.1f} ms")
    print(f"answer: {len(body) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
