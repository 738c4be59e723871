"""A replica's Slurm job through the cluster's login node: submitted, watched, cancelled, and
its nodes joined to the fleet (the I/O edge; the commands and readers are pure).

Everything runs over SSH to the inventory's `login`, as `llmgw_core.fleet.slurm_login`
reads the cluster. The job holds its nodes with `llmgw hold` (`llmgw_core.slurm.hold`),
and the console reaches each node's agent with an `srun --overlap` relay from the
login node: no SSH into a compute node.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Callable
from typing import Any

from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.fleet.deploy import REMOTE_CACHE, Deployment, ensure_agent
from llmgw_core.fleet.slurm_login import SlurmCommandFailed, _run, login_target
from llmgw_core.fleet.ssh import SshConnector
from llmgw_core.inventory import InventoryCluster, NodeSpec
from llmgw_core.slurm.commands import ReplicaJob, cancel_argv, job_argv, queue_argv, sbatch_argv
from llmgw_core.slurm.hold import HOLD_SCRIPT, fleet_node_name, relay_command
from llmgw_core.slurm.jobs import SlurmJob, read_jobs_json, read_jobs_oneline, read_submitted
from llmgw_core.slurm.nodes import SlurmNode
from llmgw_core.slurm.shape import JobShape

_ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:_-]{0,252}$")
JOB_PREFIX = "llmgw-"
"""Every replica's job is named `llmgw-<replica>`: how a console finds the jobs it may adopt."""
POLL_S = 1.0
COMPLETING_WAIT_S = 10.0
"""How long a lost node's job is watched for its final state while Slurm winds it down."""
CANCEL_WAIT_S = 30.0
"""How long a stop waits for a cancelled job to finish completing (Slurm's KillWait)."""
ENDED = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
"""Job states from which a job never runs again (a requeued job goes back to PENDING)."""


class JobNotRunning(LlmgwError):
    """A replica's job did not start (still pending when told to give up) or ended."""

    def __init__(self, message: str, fix: str = "", *, job: SlurmJob | None = None) -> None:
        super().__init__(message, fix)
        self.job = job


def hold_root(deployment: Deployment) -> str:
    """The folder, in the login node's (shared) home, of every job's sockets and shard state."""
    return f"{deployment.home}/{REMOTE_CACHE}/slurm"


def job_words(job: SlurmJob) -> str:
    """A job's state and Slurm's reason as one sentence's words: `PENDING (Reason=Resources)`."""
    reason = job.reason or "None"
    detail = f": {job.reason_detail}" if job.reason_detail and job.reason_detail != reason else ""
    return f"{job.state} (Reason={reason}{detail})"


class LoginNode:
    """One SSH connection to a cluster's login node, for the commands of one replica's job."""

    def __init__(self, cluster: InventoryCluster, connection: Any) -> None:
        self.cluster = cluster
        self.connection = connection
        self.where = f"{cluster.name}'s login node {cluster.slurm.login}"

    @classmethod
    async def open(cls, connector: SshConnector, cluster: InventoryCluster) -> LoginNode:
        """Connect to the cluster's login node (its host key checked like a node's)."""
        return cls(cluster, await connector.connect(login_target(cluster)))

    def close(self) -> None:
        """Close the connection (nothing running on the login node depends on it)."""
        self.connection.close()

    async def run(self, argv: list[str]) -> str:
        """One command on the login node; its output, or `SlurmCommandFailed` in one sentence."""
        return await _run(self.connection, argv, self.where)

    async def deploy(self) -> Deployment:
        """The agent's zipapp in the login node's home (shared with the compute nodes)."""
        return await ensure_agent(self.connection, self.cluster.name)

    async def _put_hold_script(self, deployment: Deployment) -> str:
        digest = hashlib.sha256(HOLD_SCRIPT.encode()).hexdigest()[:12]
        path = f"{deployment.home}/{REMOTE_CACHE}/slurm-hold-{digest}.sh"
        # The jobs' folder too: Slurm fails a job whose --output folder is missing
        # (JobLaunchFailure) before its script runs.
        write = 'umask 077; mkdir -p "$2"; cat > "$1.tmp" && mv "$1.tmp" "$1"'
        root = _quote(hold_root(deployment))
        done = await self.connection.run(
            f"/bin/sh -c {_quote(write)} llmgw {_quote(path)} {root}",
            input=HOLD_SCRIPT,
            check=False,
        )
        if done.exit_status != 0:
            said = str(done.stderr or "").strip().splitlines()
            raise SlurmCommandFailed(
                f"the job script could not be written on {self.where}: "
                f"{said[-1] if said else f'exit status {done.exit_status}'}"
            )
        return path

    async def submit(self, replica: str, shape: JobShape, deployment: Deployment) -> str:
        """`sbatch` the replica's job; its id.

        Raises:
            BadInput: Slurm refused the request as asked (a partition, account or QoS that
                does not exist, a configuration no node has): one sentence, Slurm's words.
            SlurmCommandFailed: sbatch failed otherwise.
        """
        slurm = self.cluster.slurm
        script = await self._put_hold_script(deployment)
        root = hold_root(deployment)
        job = ReplicaJob(
            job_name=f"{JOB_PREFIX}{replica}",
            script=script,
            script_args=(deployment.agent_path, root, *((slurm.replay,) if slurm.replay else ())),
            nodes=shape.nodes,
            gpus_per_node=shape.gpus_per_node,
            gpu_type=shape.gpu_type,
            gres_name=slurm.gres_name,
            partition=slurm.partition,
            account=slurm.account,
            qos=slurm.qos,
            constraint=slurm.constraint,
            reservation=slurm.reservation,
            time_limit=slurm.time_limit,
            nodelist=shape.nodelist,
            output=f"{root}/%j.out",
        )
        try:
            answer = await self.run(sbatch_argv(job))
        except SlurmCommandFailed as exc:
            said = exc.message.split(" failed: ", 1)[-1]
            raise BadInput(
                f"Slurm refused the job of {replica} on {self.cluster.name}: {said}",
                "check the cluster's partition, account, qos, reservation and constraint "
                "in the inventory against `sinfo` and `sacctmgr show assoc` on its login node",
            ) from None
        return read_submitted(answer, f"sbatch's answer on {self.where}")

    async def job(self, job_id: str) -> SlurmJob:
        """The job as the scheduler sees it now (`scontrol -o -d show job`, every release).

        Raises:
            JobNotRunning: the controller no longer knows the job (it ended a while ago).
        """
        try:
            text = await self.run(job_argv(job_id))
        except SlurmCommandFailed as exc:
            if "invalid job id" in exc.message.lower():
                raise JobNotRunning(
                    f"job {job_id} on {self.cluster.name} is gone from the scheduler"
                ) from None
            raise
        jobs = read_jobs_oneline(
            text, f"job {job_id} on {self.cluster.name}", self.cluster.slurm.gres_name
        )
        if not jobs:
            raise JobNotRunning(f"job {job_id} on {self.cluster.name} is gone from the scheduler")
        return jobs[0]

    async def our_jobs(self) -> list[SlurmJob]:
        """This user's replica jobs still pending or running in this entry's partition
        (`squeue --json --me`): two entries may share a login node, one a partition, and a
        job joins the fleet under the entry it was submitted for."""
        text = await self.run(queue_argv([]))
        jobs = read_jobs_json(
            text, f"the queue of {self.cluster.name}", self.cluster.slurm.gres_name
        )
        ours = set(self.cluster.slurm.partition.split(","))
        return [
            j
            for j in jobs
            if j.name.startswith(JOB_PREFIX)
            and j.state not in ENDED
            # A job lists its partitions while pending, the one it runs in once running (and
            # none where a release leaves the field out).
            and set(filter(None, j.partition.split(","))) <= ours
        ]

    async def wait_running(
        self,
        job_id: str,
        wait_s: float,
        heard: Callable[[SlurmJob], None] = lambda job: None,
    ) -> SlurmJob:
        """Until the job runs; `heard(job)` at every poll (the first within `POLL_S`).

        Raises:
            JobNotRunning: it ended before it ran, or was still pending after `wait_s`
                (it is left for the caller to cancel), in one sentence with Slurm's reason.
        """
        deadline = time.monotonic() + wait_s
        while True:
            job = await self.job(job_id)
            heard(job)
            if job.state == "RUNNING" and job.nodes:
                return job
            if job.state in ENDED:
                raise JobNotRunning(
                    f"job {job_id} on {self.cluster.name} ended before it ran: {job_words(job)}",
                    job=job,
                )
            if time.monotonic() >= deadline:
                raise JobNotRunning(
                    f"job {job_id} on {self.cluster.name} is still {job_words(job)} "
                    f"after {wait_s:g} s",
                    "give `wait_s:` more time, or free or ask for fewer cards",
                    job=job,
                )
            await asyncio.sleep(POLL_S)

    async def cancel(self, job_id: str) -> None:
        """`scancel` the job (its step stops its shards, the allocation is given back); a job
        that has ended already is left as it is."""
        try:
            await self.run(cancel_argv(job_id))
        except SlurmCommandFailed as exc:
            said = exc.message.lower()
            if "already completing or completed" not in said and "invalid job id" not in said:
                raise

    async def wait_ended(self, job_id: str, timeout_s: float = CANCEL_WAIT_S) -> SlurmJob | None:
        """Until the job has ended and finished completing (its cards given back, gone from
        `squeue`), or `timeout_s`; the job as last seen (None: the controller forgot it)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                job = await self.job(job_id)
            except JobNotRunning:
                return None
            if job.state in ENDED and "COMPLETING" not in job.state_flags:
                return job
            if time.monotonic() >= deadline:
                return job
            await asyncio.sleep(0.25)


def job_node_specs(
    cluster: InventoryCluster, job: SlurmJob, nodes: list[SlurmNode], root: str
) -> list[NodeSpec]:
    """The fleet's nodes for a running job: one per allocated node, reached through the login
    node by the relay, its engines bound to the address Slurm gives the node."""
    address = {
        node.name: found
        for node in nodes
        if (found := node.address or node.hostname) and _ADDRESS.match(found)
    }  # what Slurm printed, taken only where it reads as a host name or an address
    return [
        NodeSpec(
            name=fleet_node_name(node, job.job_id),
            host=cluster.slurm.login,
            port=cluster.slurm.port,
            user=cluster.slurm.user,
            identity_file=cluster.slurm.identity_file,
            engine_bind=address.get(node) or None,
            fabrics=cluster.fabrics,
            labels={"slurm-cluster": cluster.name, "slurm-job": job.job_id, "slurm-node": node},
            relay=relay_command(job.job_id, node, root),
            cluster=cluster.name,
            job_id=job.job_id,
        )
        for node in job.nodes
    ]


def _quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


async def join_running_jobs(fleet: Any) -> list[str]:
    """Join the nodes of every replica job this user runs on the inventory's clusters, so a
    console started later finds, lists and stops the replicas in them; the job ids joined.

    A cluster whose login node does not answer is left out (its replicas show once it does):
    the SSH nodes must not wait on it.
    """
    from llmgw_core.fleet.slurm_login import read_cluster

    joined: list[str] = []
    for cluster in fleet.inventory.clusters:
        try:
            login = await LoginNode.open(fleet.connector, cluster)
        except (LlmgwError, OSError):
            continue
        try:
            jobs = [job for job in await login.our_jobs() if job.state == "RUNNING" and job.nodes]
            if not jobs:
                continue
            root = hold_root(await login.deploy())
            nodes = list((await read_cluster(fleet.connector, cluster)).nodes)
        except (LlmgwError, OSError):
            continue
        finally:
            login.close()
        for job in jobs:
            fleet.add_job_nodes(job_node_specs(cluster, job, nodes, root))
            joined.append(job.job_id)
    return joined


async def cancel_replica_jobs(fleet: Any, jobs: list[tuple[str, str]]) -> list[str]:
    """`scancel` the jobs (cluster, job id) of a stopped replica and leave their nodes; the
    job ids cancelled."""
    cancelled = []
    for cluster_name, job_id in jobs:
        cluster = fleet.inventory.cluster(cluster_name)
        login = await LoginNode.open(fleet.connector, cluster)
        try:
            await login.cancel(job_id)
            await login.wait_ended(job_id)
            cancelled.append(job_id)
        finally:
            login.close()
        names = [
            s.name
            for s in fleet.inventory.node_specs()
            if s.job_id == job_id and s.cluster == cluster_name
        ]
        await fleet.remove_job_nodes(names)
    return cancelled


async def with_job_states(fleet: Any, rows: list[dict[str, Any]]) -> None:
    """Each Slurm replica's row (`slurm` set) gets its job's state and Slurm's reason, read
    from the scheduler now (`PENDING`, `RUNNING`, `CANCELLED`… or `GONE` when the controller
    no longer knows it); a login node that does not answer leaves them unknown (None)."""
    wanted: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        slurm = row.get("slurm")
        if slurm and slurm.get("cluster") and slurm.get("job_id"):
            wanted.setdefault(str(slurm["cluster"]), []).append(slurm)
    for cluster_name, records in wanted.items():
        try:
            login = await LoginNode.open(fleet.connector, fleet.inventory.cluster(cluster_name))
        except (LlmgwError, OSError):
            continue
        try:
            for record in records:
                try:
                    job = await login.job(str(record["job_id"]))
                except JobNotRunning:
                    record.update(state="GONE", reason=None)
                    continue
                except LlmgwError:
                    record.update(state=None, reason=None)
                    continue
                record.update(state=job.state, reason=job.reason or None)
        finally:
            login.close()


async def job_end_reason(fleet: Any, spec: NodeSpec) -> str | None:
    """The sentence a job's node is lost with once its job has ended, in the scheduler's
    words (`job 12 on big ended: CANCELLED (Reason=None)`); None while the job still runs."""
    if spec.cluster is None or spec.job_id is None:
        return None
    login = await LoginNode.open(fleet.connector, fleet.inventory.cluster(spec.cluster))
    try:
        job = await login.job(spec.job_id)
        if job.state == "COMPLETING":
            # The scheduler is ending it (its steps, the relay among them, are already gone):
            # its final state (CANCELLED, TIMEOUT…) comes once its steps have wound down.
            job = await login.wait_ended(spec.job_id, COMPLETING_WAIT_S) or job
    except JobNotRunning as exc:
        return exc.sentence()
    finally:
        login.close()
    if job.state in ENDED or job.state == "COMPLETING":
        return f"job {job.job_id} on {spec.cluster} ended: {job_words(job)}"
    return None
