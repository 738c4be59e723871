"""A Slurm cluster read through its login node: which release, and its nodes (the I/O edge;
the readers in `llmgw_core.slurm` are pure).

Over one SSH connection to the inventory's `login` (a host, an address or an
~/.ssh/config alias, ProxyJump allowed, its host key checked like a node's):
`scontrol --version`, then the node listing that release prints best
(`SlurmVersion.node_listing`), read by the typed readers. A JSON listing the
site's Slurm cannot print (built without its JSON serializer) is asked again
as `scontrol -o -d show node`, which every release prints. The nodes of the
entry's partition are kept. Asked for its jobs too (the console's fleet), it
lists every job the controller knows (`scontrol -o -d show job`) and keeps those
holding a node of the partition now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.fleet.ssh import SshConnector, SshTarget
from llmgw_core.inventory import InventoryCluster, login_spec
from llmgw_core.slurm.commands import (
    all_jobs_argv,
    node_listing_argv,
    remote_command,
    version_argv,
)
from llmgw_core.slurm.jobs import SlurmJob, read_jobs_oneline
from llmgw_core.slurm.nodes import SlurmNode, read_nodes_json, read_nodes_oneline
from llmgw_core.slurm.version import SlurmVersion, read_version

COMMAND_TIMEOUT_S = 30.0
NO_JOBS = "No jobs in the system"
"""What `scontrol show job` prints, on stdout with exit status 0, when the queue is empty."""


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
    jobs: tuple[SlurmJob, ...] | None = None
    """The jobs holding the partition's nodes now, when they were asked for."""

    def as_dict(self) -> dict[str, Any]:
        """The reading as a step's result gives it (`jobs` only when they were read)."""
        slurm = self.cluster.slurm
        found: dict[str, Any] = {
            "cluster": self.cluster.name,
            "login": slurm.login,
            "partition": slurm.partition,
            "slurm": str(self.version),
            "listing": self.listing,
            "nodes": [node.model_dump(mode="json") for node in self.nodes],
        }
        if self.jobs is not None:
            found["jobs"] = [job.model_dump(mode="json") for job in self.jobs]
        return found


def login_target(cluster: InventoryCluster) -> SshTarget:
    """Where the cluster's login node is: its `login`, with the `port`, `user` and
    `identity_file` the entry gives (else ~/.ssh/config decides, as for a node)."""
    return SshTarget.of(login_spec(cluster), node=cluster.name)


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


async def read_cluster(
    connector: SshConnector, cluster: InventoryCluster, *, jobs: bool = False
) -> ClusterReading:
    """The cluster's release and the nodes of its partition, from its login node; with `jobs`,
    also every unfinished job holding one of those nodes (any user's).

    Raises:
        LlmgwError: the login node is unreachable or its host key refused; a Slurm
            command failed there (one sentence, Slurm's own last line); its output is
            not what that release prints (`SlurmOutputUnreadable`).
    """
    slurm = cluster.slurm
    where = f"{cluster.name}'s login node {slurm.login}"
    connection = await connector.connect(login_target(cluster))
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
        listed = await _run(connection, all_jobs_argv(), where) if jobs else None
    finally:
        connection.close()
    kept = tuple(node for node in nodes if slurm.partition in node.partitions)
    holding: tuple[SlurmJob, ...] | None = None
    if listed is not None:
        names = {node.name for node in kept}
        found = (
            []
            if listed.strip() == NO_JOBS
            else read_jobs_oneline(listed, f"the job list of {cluster.name}", slurm.gres_name)
        )
        holding = tuple(job for job in found if not job.finished and names.intersection(job.nodes))
    return ClusterReading(
        cluster=cluster, version=version, listing=listing, nodes=kept, jobs=holding
    )


async def read_clusters_or_sentences(
    connector: SshConnector, clusters: list[InventoryCluster] | tuple[InventoryCluster, ...]
) -> list[dict[str, Any]]:
    """Each cluster with its jobs (`ClusterReading.as_dict`), or, for one that could not be
    read, `{"cluster", "login", "error"}` with the sentence: one cluster's login failing must
    not hide the others (the console's fleet shows it as one red line)."""
    readings: list[dict[str, Any]] = []
    for cluster in clusters:
        try:
            reading = await read_cluster(connector, cluster, jobs=True)
        except LlmgwError as exc:
            readings.append(
                {"cluster": cluster.name, "login": cluster.slurm.login, "error": exc.sentence()}
            )
        except OSError as exc:
            readings.append(
                {
                    "cluster": cluster.name,
                    "login": cluster.slurm.login,
                    "error": f"{cluster.name}'s login node {cluster.slurm.login} "
                    f"could not be reached: {exc}",
                }
            )
        else:
            readings.append(reading.as_dict())
    return readings
