"""A Slurm cluster read through its login node: which release, and its nodes (the I/O edge;
the readers in `llmgw_core.slurm` are pure).

Over one SSH connection to the inventory's `login` (a host, an address or an
~/.ssh/config alias, ProxyJump allowed, its host key checked like a node's):
`scontrol --version`, then the node listing that release prints best
(`SlurmVersion.node_listing`), read by the typed readers. A JSON listing the
site's Slurm cannot print (built without its JSON serializer) is asked again
as `scontrol -o -d show node`, which every release prints. The nodes of the
entry's partition are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.fleet.ssh import SshConnector, SshTarget
from llmgw_core.inventory import InventoryCluster
from llmgw_core.slurm.commands import node_listing_argv, remote_command, version_argv
from llmgw_core.slurm.nodes import SlurmNode, read_nodes_json, read_nodes_oneline
from llmgw_core.slurm.version import SlurmVersion, read_version

COMMAND_TIMEOUT_S = 30.0


class SlurmCommandFailed(LlmgwError):
    """A Slurm command on the login node exited with an error."""


class NotASlurmLogin(BadInput):
    """The inventory's `login` does not run Slurm's commands: bad input, exit code 2."""


@dataclass(frozen=True)
class ClusterReading:
    """What the scheduler said of one cluster's partition, at one moment."""

    cluster: InventoryCluster
    version: SlurmVersion
    listing: str
    nodes: tuple[SlurmNode, ...]

    def as_dict(self) -> dict[str, Any]:
        """The reading as a step's result gives it."""
        slurm = self.cluster.slurm
        return {
            "cluster": self.cluster.name,
            "login": slurm.login,
            "partition": slurm.partition,
            "slurm": str(self.version),
            "listing": self.listing,
            "nodes": [node.model_dump(mode="json") for node in self.nodes],
        }


async def _run(connection: Any, argv: list[str], where: str) -> str:
    """One command on the login node: its output, or one sentence with its error."""
    try:
        done = await connection.run(
            remote_command(argv), check=False, timeout=COMMAND_TIMEOUT_S, encoding="utf-8"
        )
    except TimeoutError:
        raise SlurmCommandFailed(
            f"`{' '.join(argv)}` on {where} did not finish within {COMMAND_TIMEOUT_S:g} s"
        ) from None
    except OSError as exc:
        raise SlurmCommandFailed(f"`{' '.join(argv)}` on {where} failed: {exc}") from None
    if done.exit_status != 0:
        said = str(done.stderr or done.stdout or "").strip().splitlines()
        last = said[-1] if said else f"exit status {done.exit_status}"
        raise SlurmCommandFailed(f"`{' '.join(argv)}` on {where} failed: {last[:300]}")
    return str(done.stdout or "")


async def read_cluster(connector: SshConnector, cluster: InventoryCluster) -> ClusterReading:
    """The cluster's release and the nodes of its partition, from its login node.

    Raises:
        LlmgwError: the login node is unreachable or its host key refused; a Slurm
            command failed there (one sentence, Slurm's own last line); its output is
            not what that release prints (`SlurmOutputUnreadable`).
    """
    slurm = cluster.slurm
    where = f"{cluster.name}'s login node {slurm.login}"
    connection = await connector.connect(SshTarget(node=cluster.name, host=slurm.login))
    try:
        try:
            version_text = await _run(connection, version_argv(), where)
        except SlurmCommandFailed as exc:
            raise NotASlurmLogin(
                exc.message,
                f"point {cluster.name}'s `login` at the cluster's login node, where sinfo, "
                "squeue, scontrol, sbatch and scancel are on the PATH",
            ) from None
        version = read_version(version_text, f"scontrol --version on {where}")
        listing = version.node_listing
        source = f"the node list of {cluster.name}"
        try:
            text = await _run(connection, node_listing_argv(listing), where)
            nodes = (
                read_nodes_oneline(text, source, slurm.gres_name)
                if listing == "oneline"
                else read_nodes_json(text, source, slurm.gres_name)
            )
        except SlurmCommandFailed:
            if listing == "oneline":
                raise
            listing = "oneline"  # a Slurm built without its JSON serializer
            text = await _run(connection, node_listing_argv(listing), where)
            nodes = read_nodes_oneline(text, source, slurm.gres_name)
    finally:
        connection.close()
    kept = tuple(node for node in nodes if slurm.partition in node.partitions)
    return ClusterReading(cluster=cluster, version=version, listing=listing, nodes=kept)
