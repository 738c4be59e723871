"""The demo's Slurm cluster (`llmgw-tui demo up --slurm`): real Slurm daemons on this machine,
reached through a login node, beside the demo's SSH nodes.

Debian's `slurmctld`, one `slurmd -N NAME` per node and munged run as the operator in the
demo's folder (`llmgw_core.fleet.sim.slurm`). Two HGX H100 nodes (8 cards each, the InfiniBand
rails of `ib-s`) make partition `hgx`; four trays of one GB200 NVL72 rack (4 cards each, one
NVLink domain) make partition `nvl`. The login node is an SSH server on loopback whose
sessions carry the cluster's `SLURM_CONF`, as a site's login node has its own; the
inventory names it twice, once per partition, as clusters `hgx` and `nvl`.

Every Slurm node is this machine, so each node's agent replays a simulated node of its own
(the cluster entry's `replay:`), as the demo's SSH nodes do. The sim engine runs in the jobs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from llmgw_core.fleet.loopback import LoopbackSshd
from llmgw_core.fleet.sim.nodes import capture_adapters
from llmgw_core.fleet.sim.slurm import NodeLine, PartitionLine, SlurmCluster, start_cluster

NVL_CLUSTER_UUID = "9d1e7c42-5a60-4b8e-b3f1-6c2a0e9d8b47"
NVL_CLIQUE_ID = 4101
NVL_TRAYS = 4
RAIL_RATE_GBPS = 400


@dataclass(frozen=True)
class DemoSlurmNode:
    """One node of the demo's Slurm cluster: its slurm.conf line and the hardware it replays."""

    line: NodeLine
    profile: str
    options: dict[str, Any]


def demo_slurm_nodes() -> list[DemoSlurmNode]:
    """The Slurm nodes of the demo, in slurm.conf's order."""
    nodes = [
        DemoSlurmNode(NodeLine(f"hgx-{n}", 8, 64000, ("h100", "nvlink"), "h100", 8), "hgx-h100", {})
        for n in (1, 2)
    ]
    nodes += [
        DemoSlurmNode(
            NodeLine(f"nvl-t{tray}", 8, 64000, ("gb200", "nvl72"), "gb200", 4),
            "gb200-tray",
            {
                "tray": tray,
                "rack": "nvl72-s1",
                "cluster_uuid": NVL_CLUSTER_UUID,
                "clique_id": NVL_CLIQUE_ID,
                "state": "joined",
            },
        )
        for tray in range(1, NVL_TRAYS + 1)
    ]
    return nodes


PARTITIONS = {"hgx": "hgx-", "nvl": "nvl-"}
"""Each partition, and so each cluster of the inventory, with the prefix of its nodes' names."""


@dataclass
class DemoSlurm:
    """The running Slurm cluster of the demo, its login node, and its inventory entries.

    Attributes:
        cluster: the daemons.
        login: the login node's SSH server.
        entries: the inventory's `clusters:` (one a partition).
    """

    cluster: SlurmCluster
    login: LoopbackSshd
    entries: list[dict[str, Any]]

    async def stop(self) -> None:
        """Cancel every job, end every daemon and the processes of its jobs, stop the login."""
        await asyncio.to_thread(self.cluster.stop)
        await self.login.stop()


async def start_demo_slurm(root: Path, authorized_keys: str, key_file: Path) -> DemoSlurm:
    """Start the cluster in `root` and its login node (which `authorized_keys` may enter);
    the inventory entries reach it with `key_file`.

    Raises:
        RuntimeError: a daemon did not start (the message names its log).
        TimeoutError: the nodes were not all idle in time.
    """
    from llmgw_agent.sim.profiles import write_profile

    nodes = demo_slurm_nodes()
    captures = root / "captures"
    for node in nodes:
        options = {"hostname": node.line.name, **node.options}
        write_profile(node.profile, captures / node.line.name, **options)
    partitions = tuple(
        PartitionLine(
            name,
            tuple(n.line.name for n in nodes if n.line.name.startswith(prefix)),
            default=index == 0,
        )
        for index, (name, prefix) in enumerate(PARTITIONS.items())
    )
    cluster = await asyncio.to_thread(
        start_cluster, root / "daemons", tuple(n.line for n in nodes), partitions
    )
    login = LoopbackSshd(
        home=root / "login-home",
        host_key=asyncssh.generate_private_key("ssh-ed25519"),
        authorized_keys=authorized_keys,
        env={"SLURM_CONF": str(cluster.conf)},
        allow_forwarding=True,  # the console reaches the jobs' engines through tunnels
    )
    try:
        await login.start()
    except BaseException:
        await asyncio.to_thread(cluster.stop)
        raise
    entries = []
    for partition, prefix in PARTITIONS.items():
        first = next(n for n in nodes if n.line.name.startswith(prefix))
        entry: dict[str, Any] = {
            "name": partition,
            "slurm": {
                "login": "127.0.0.1",
                "port": login.port,
                "identity_file": str(key_file),
                "partition": partition,
                "replay": str(captures),
            },
        }
        hcas = capture_adapters(captures / first.line.name)
        if hcas:
            fabric = {"name": f"ib-{partition}", "hcas": hcas, "rate_gbps": RAIL_RATE_GBPS}
            entry["fabrics"] = [fabric]
        entries.append(entry)
    return DemoSlurm(cluster=cluster, login=login, entries=entries)
