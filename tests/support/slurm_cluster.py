"""The suite's Slurm cluster: the product's private cluster (`llmgw_core.fleet.sim.slurm`)
with the suite's nodes, on a loopback address and ports of each xdist worker's own."""

from __future__ import annotations

import os
from pathlib import Path

from llmgw_core.fleet.sim.slurm import (
    NodeLine,
    PartitionLine,
    SlurmCluster,
    free_ports,
    slurm_missing,
)
from llmgw_core.fleet.sim.slurm import start_cluster as start_private_cluster

__all__ = ["NODES", "PARTITIONS", "SlurmCluster", "node_address", "slurm_missing", "start_cluster"]

PORTS_FROM = 27100
"""Slurm's ports come from a block of their own, below the kernel's ephemeral range and above
the demo gateways' (kept_demo's 21000 to 27000)."""
PORTS_TO = 28000
WORKER_SHARES = 8
"""The block is cut into this many shares, one an xdist worker (112 ports each): two workers'
clusters starting at once once took the same port, and one slurmctld then reached the
other's slurmd, which its munge key did not open."""

NODES = (
    NodeLine("h100-1", 8, 64000, ("h100", "nvlink"), "h100", 8),
    NodeLine("h100-2", 8, 64000, ("h100", "nvlink"), "h100", 8),
    NodeLine("a100-1", 8, 32000, ("a100",), "a100", 4),
    NodeLine("cpu-1", 4, 16000, ("cpu",)),
)
PARTITIONS = (
    PartitionLine("gpu", ("h100-1", "h100-2", "a100-1"), default=True),
    PartitionLine("cpu", ("cpu-1",), max_time_min=60),
)


def _worker() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return int(worker) if worker.isdigit() else 0


def node_address() -> str:
    """The loopback address this worker's cluster gives its nodes (`NodeAddr`), one a
    pytest-xdist worker: a job's engines bind the address Slurm gives their node from the
    same first port, so two workers' clusters on 127.0.0.1 took each other's engine port
    (a replica answered health on the other's engine, and its `ask` hung)."""
    return f"127.0.0.{11 + _worker() % 200}"


def start_cluster(
    root: Path,
    nodes: tuple[NodeLine, ...] = NODES,
    partitions: tuple[PartitionLine, ...] = PARTITIONS,
) -> SlurmCluster:
    """The suite's cluster in `root`, started and idle (see `start_private_cluster`)."""
    share = (PORTS_TO - PORTS_FROM) // WORKER_SHARES
    first = PORTS_FROM + _worker() % WORKER_SHARES * share
    return start_private_cluster(
        root,
        nodes,
        partitions,
        ports=free_ports(1 + len(nodes), first, first + share),
        address=node_address(),
        name="llmgwtest",
    )
