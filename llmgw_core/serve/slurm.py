"""Serving a replica on a Slurm cluster: one job, then the same start as on SSH nodes.

`serve_on_cluster` is plan → submit → wait for the scheduler → join → serve:

* the planner sizes the replica against the partition as the scheduler describes
  it (each GRES type as its GPU class), unless the operator fixed the layout;
* one `sbatch` asks for those nodes and cards (`--nodes N --gres=gpu:TYPE:K
  --ntasks-per-node 1`, the inventory's account, QoS, constraint, reservation and
  time limit, `--nodelist` where nodes have the cards free now). The allocation
  is the claim: the agent in the job offers only the cards Slurm gave it;
* while the job is pending, each poll hears Slurm's reason; after `wait_s` the
  job is cancelled and the serve fails with that reason in its sentence;
* once it runs, each allocated node joins the fleet, reached through the login
  node (`llmgw_core.slurm.hold`), and `serve` starts the replica on exactly
  those nodes (`JobFleet`): placement, launch, readiness, the records in each
  shard's spec (with the job: `{cluster, job_id, nodes}`) are the SSH path's own.

A serve that fails cancels its job: nothing is left holding cards. A serve called off
(the console quit) cancels it too, unless a shard of the replica was started in it: that
job is left running, as started shards are on SSH nodes, for any later console to list
and stop.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import Any

from llmgw_agent.ops import Op
from llmgw_core.errors import BadInput, DoesNotFit, LlmgwError
from llmgw_core.fleet.slurm_jobs import (
    JobNotRunning,
    LoginNode,
    hold_root,
    job_node_specs,
    job_words,
)
from llmgw_core.fleet.slurm_login import read_cluster
from llmgw_core.fleet.state import FleetState
from llmgw_core.model.source import ModelInfo
from llmgw_core.serve.http import EngineReach
from llmgw_core.serve.launch import default_replica_name
from llmgw_core.serve.prepare import ServeRequest, refuse_a_running_name
from llmgw_core.serve.progress import Trace
from llmgw_core.serve.start import ServeOutcome, serve
from llmgw_core.slurm.jobs import SlurmJob
from llmgw_core.slurm.nodes import SlurmNode
from llmgw_core.slurm.shape import JobShape, described_partition, job_shape

JOIN_TIMEOUT_S = 120.0
"""How long the job's nodes have to answer once it runs (each node's first agent start)."""


class JobFleet:
    """The live fleet as one job's replica sees it: the job's nodes, and no others.

    `serve` places on every ready node of the fleet it is given; given this, it
    places on the job's nodes only. Everything else is the fleet's own.
    """

    def __init__(self, fleet: Any, names: list[str]) -> None:
        self._fleet = fleet
        self._names = set(names)
        specs = tuple(s for s in fleet.inventory.node_specs() if s.name in self._names)
        self.inventory = fleet.inventory.model_copy(update={"nodes": ()}).with_job_nodes(specs)
        self.shard_started = False
        """True once a `shard.start` went to one of the job's nodes (a shard may run there)."""

    async def request(
        self, name: str, op: str, args: dict[str, Any] | None = None, *, timeout_s: float = 60.0
    ) -> Any:
        """The fleet's `request`, noting a shard's start before it is sent."""
        if op == Op.SHARD_START:
            self.shard_started = True
        return await self._fleet.request(name, op, args, timeout_s=timeout_s)

    def snapshot(self) -> FleetState:
        """The fleet's snapshot, cut to the job's nodes."""
        whole = self._fleet.snapshot()
        nodes = {name: node for name, node in whole.nodes.items() if name in self._names}
        return whole.model_copy(update={"nodes": nodes})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fleet, name)


def _shape(
    request: ServeRequest, model: ModelInfo, nodes: tuple[SlurmNode, ...], cluster: str
) -> JobShape:
    """The job's size: the operator's layout where fixed, else the planner's best way on the
    partition as the scheduler describes it."""
    wanted = request.overrides
    if wanted.gpus is not None and wanted.gpu_class is not None:
        return job_shape(
            nodes,
            gpu_class=wanted.gpu_class,
            gpus_per_node=wanted.gpus,
            node_count=wanted.nodes or 1,
        )
    from llmgw_core.planner.plan import plan
    from llmgw_core.planner.pools import described_fleet

    entries = described_partition(nodes)
    if wanted.gpu_class is not None:
        entries = [e for e in entries if e["gpu"] == wanted.gpu_class]
        if not entries:
            raise BadInput(
                f"no node of {cluster}'s partition has {wanted.gpu_class} cards",
                "serve another class there, or leave `gpu_class:` out",
            )
    shape = model.any_shape
    context = request.context or (shape.max_context if shape else None)
    if context is None:
        raise BadInput(
            f"{request.model}: the trained context is unknown", "give `context:` in tokens"
        )
    result = plan(
        model,
        described_fleet(entries),
        format=request.format,
        context=context,
        concurrency=request.concurrency,
    )
    best = result.best
    if best is None:
        raise DoesNotFit(
            f"{request.model} does not fit on {cluster}: {result.does_not_fit_sentence()}"
        )
    if best.gpu_class == "cpu" or best.cards == 0:
        raise BadInput(
            f"{request.model} would run on a CPU node, and llmgw serves on Slurm's GPU nodes only",
            "serve it on an SSH node",
        )
    per_node = wanted.gpus or max(1, best.cards // max(1, best.nodes))
    return job_shape(
        nodes,
        gpu_class=best.gpu_class,
        gpus_per_node=per_node,
        node_count=wanted.nodes or best.nodes,
    )


async def serve_on_cluster(
    fleet: Any,
    reach: EngineReach,
    request: ServeRequest,
    model: ModelInfo,
    cluster_name: str,
    *,
    wait_s: float,
) -> ServeOutcome:
    """Serve `model` as one job on the inventory's cluster `cluster_name`; see the module
    docstring. A job pending past `wait_s`, or ended before it ran, is a failed serve whose
    reason is Slurm's.

    Raises:
        BadInput: no such cluster; Slurm refused the request (a partition, account or QoS
            that does not exist); a login node without Slurm.
        DoesNotFit: the model fits on no node of the partition.
    """
    cluster = fleet.inventory.cluster(cluster_name)
    reading = await read_cluster(fleet.connector, cluster)
    if not reading.nodes:
        raise BadInput(
            f"{cluster.name}'s partition {cluster.slurm.partition} has no nodes: "
            "Slurm has no partition of that name there, or it is empty",
            f"set {cluster.name}'s `partition` to one `sinfo` lists on its login node",
        )
    shape = _shape(request, model, reading.nodes, cluster.name)
    name = request.name or default_replica_name(model)
    # Asked of the whole fleet: the job's own serve sees only the job's nodes, and a replica of
    # that name in another job would run on beside the new one.
    await refuse_a_running_name(fleet, name)
    trace = Trace()
    login = await LoginNode.open(fleet.connector, cluster)
    job_id: str | None = None
    try:
        deployment = await login.deploy()
        job_id = await login.submit(name, shape, deployment)
        asked = f"{shape.nodes} × {shape.gpus_per_node} {shape.gpu_type}"
        where = f" on {','.join(shape.nodelist)}" if shape.nodelist else ""
        trace.add("job submitted", None, f"job {job_id} on {cluster.name}: {asked}{where}")
        heard: list[str] = []

        def hear(job: SlurmJob) -> None:
            words = job_words(job)
            if job.state == "PENDING" and (not heard or heard[-1] != words):
                trace.add("job pending", None, f"job {job_id}: {words}")
            heard.append(words)

        try:
            job = await login.wait_running(job_id, wait_s, hear)
        except JobNotRunning as exc:
            trace.add("failed", None, exc.sentence())
            await _cancel_quietly(login, job_id)
            job_id = None
            return ServeOutcome(name=name, phase="failed", reason=exc.sentence(), trace=trace)
        trace.add("job running", None, f"job {job_id} on {', '.join(job.nodes)}")
        specs = job_node_specs(cluster, job, list(reading.nodes), hold_root(deployment))
        names = [spec.name for spec in specs]
        fleet.add_job_nodes(specs)
        try:
            await fleet.wait_for(
                lambda now: all(now.nodes[n].state == "ready" for n in names if n in now.nodes),
                JOIN_TIMEOUT_S,
            )
        except TimeoutError:
            now = fleet.snapshot()
            late = [f"{n} is {now.nodes[n].state} ({now.nodes[n].reason})" for n in names]
            reason = (
                f"the nodes of job {job_id} did not answer within {JOIN_TIMEOUT_S:g} s: "
                + "; ".join(late)
            )
            trace.add("failed", None, reason)
            await _end_job(fleet, login, job_id, names)
            job_id = None
            return ServeOutcome(name=name, phase="failed", reason=reason, trace=trace)
        trace.add("job joined", None, ", ".join(names))
        within = replace(
            request,
            name=name,
            overrides=replace(
                request.overrides,
                gpu_class=shape.gpu_class,
                gpus=shape.gpus_per_node,
                nodes=shape.nodes,
            ),
            slurm={"cluster": cluster.name, "job_id": job_id, "nodes": list(job.nodes)},
        )
        job_fleet = JobFleet(fleet, names)
        try:
            outcome = await serve(job_fleet, reach, within, model)
        except asyncio.CancelledError:
            # Called off (a console quit) once a shard started: as on SSH nodes, what started
            # is left running, and any later console lists and stops it. Decided without an
            # await, which a second cancellation would cut short.
            if job_fleet.shard_started:
                job_id = None
            raise
        outcome.trace.steps[:0] = trace.steps
        if outcome.phase not in ("ready", "starting"):
            await _end_job(fleet, login, job_id, names)
        job_id = None
        return outcome
    finally:
        if job_id is not None:  # an error on the way: the job must not hold cards for nobody
            await _cancel_quietly(login, job_id)
        login.close()


async def _cancel_quietly(login: LoginNode, job_id: str) -> None:
    with contextlib.suppress(LlmgwError):  # it may have ended already: `replicas` says so
        await login.cancel(job_id)


async def _end_job(fleet: Any, login: LoginNode, job_id: str, names: list[str]) -> None:
    await _cancel_quietly(login, job_id)
    await fleet.remove_job_nodes(names)


async def serve_where_asked(
    fleet: Any, reach: EngineReach, request: ServeRequest, model: ModelInfo
) -> ServeOutcome:
    """Serve as `request` asks: as one job on its Slurm cluster (`request.cluster`), else on the
    fleet's nodes. The `serve` step, a service's `apply` and the console all start replicas
    here, so the faces never disagree on where one goes."""
    if request.cluster is not None:
        return await serve_on_cluster(
            fleet, reach, request, model, request.cluster, wait_s=request.wait_s
        )
    return await serve(fleet, reach, request, model)
