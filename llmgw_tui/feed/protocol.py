"""What the console asks of its feed: `FleetFeed`, the one contract every screen reaches it through."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from llmgw_core.views.fleet import FleetSummary

if TYPE_CHECKING:
    from llmgw_core.metrics.families import MetricsSnapshot
    from llmgw_core.script.registry import StepOutcome
    from llmgw_core.script.steps.plan import PlanArgs
    from llmgw_core.script.steps.serve import ServeArgs
    from llmgw_core.serve.loads import ReplicaLoad
    from llmgw_core.serve.prepare import ServePreview
    from llmgw_core.serve.start import ServeOutcome
    from llmgw_core.serve.view import ReplicaView
    from llmgw_core.service.spec import ServiceDoc
    from llmgw_core.views.clusters import ClusterSummary


class FleetFeed(Protocol):
    """A source of fleet snapshots."""

    refresh_s: float | None
    """Seconds between polls; None polls once (a fixed fleet)."""

    async def snapshot(self) -> FleetSummary:
        """The fleet as it is now."""
        ...

    async def clusters(self) -> tuple[ClusterSummary, ...]:
        """Each Slurm cluster of the inventory as its login node reads now (the `clusters`
        step's reading, with the jobs holding its nodes); a cluster that could not be read
        is its sentence (`ClusterSummary.error`), never an exception."""
        ...

    def cluster_names(self) -> tuple[str, ...]:
        """The inventory's Slurm clusters by name (no I/O; empty until the fleet is open): the
        places the Serve wizard offers beside the SSH nodes."""
        ...

    async def slurm_jobs(self, views: tuple[ReplicaView, ...]) -> dict[str, dict[str, Any]]:
        """Per Slurm replica's name, its job read from the scheduler now: `{cluster, job_id,
        nodes, state, reason}` (`state` `GONE` once the controller forgot it; None where the
        login node did not answer)."""
        ...

    async def doctor(self, node: str) -> list[dict[str, str]]:
        """The node's doctor checks: `check`, `status` (pass, warn, fail), `message`, `fix`."""
        ...

    async def refresh(self) -> None:
        """Re-read every node's facts now rather than at the next scheduled refresh."""
        ...

    async def close(self) -> None:
        """Release what the feed opened (SSH connections, the demo fleet)."""
        ...

    async def replicas(self, *, transports: bool = False) -> tuple[ReplicaView, ...]:
        """Every replica the nodes run now (with NCCL's transport per shard when asked)."""
        ...

    async def stop_replica(self, name: str) -> dict[str, Any]:
        """Stop every shard of `name` (the `stop` step's answer)."""
        ...

    def follow_logs(self, view: ReplicaView, rank: int | None) -> AsyncIterator[list[str]]:
        """Batches of a shard's log lines (every rank merged, `[rN node]` first, when None)."""
        ...

    async def serve(self, args: ServeArgs) -> ServeOutcome:
        """The `serve` step's start of `args` (`serve_request`): bring the model up on the
        fleet and wait until it answers."""
        ...

    async def ask(self, view: ReplicaView, prompt: str) -> str:
        """One chat answer of a ready replica."""
        ...

    async def gateways(self) -> list[dict[str, Any]]:
        """Every running gateway: `GatewayView.as_dict()` with its front's `workers`."""
        ...

    async def put_behind_gateway(self, name: str, api_key_env: str | None = None) -> dict[str, Any]:
        """Start (or adopt) the gateway `name` in front of every ready replica."""
        ...

    async def apply_service(self, doc: ServiceDoc) -> dict[str, Any]:
        """Make the fleet run the service `doc`, as the `apply` step does."""
        ...

    async def keep_service(self, name: str, on_event: Callable[[str], None]) -> dict[str, Any]:
        """Keep service `name` (the document its replicas carry) until cancelled, as the `keep`
        step; each event's line goes to `on_event` as it happens."""
        ...

    def follow_gateway_logs(self, name: str) -> AsyncIterator[list[str]]:
        """Batches of the gateway's front log (`[gateway node] …`), followed live."""
        ...

    async def gateway_details(self) -> list[dict[str, Any]]:
        """Every running gateway with its workers' health and its front's counts."""
        ...

    async def stop_gateway(self, name: str) -> dict[str, Any]:
        """Stop and forget the gateway `name` (the `stop` step's answer)."""
        ...

    async def gateway_usage(self, name: str) -> dict[str, Any]:
        """What each client key of gateway `name` used, per UTC day and model (the `usage`
        step's answer)."""
        ...

    async def bench(self, view: ReplicaView) -> dict[str, Any]:
        """Tokens a second of a ready replica (`replica_http.bench`'s figures)."""
        ...

    async def metrics_snapshot(self) -> MetricsSnapshot:
        """What `--metrics-port` exports now: the fleet and replicas as last polled."""
        ...

    async def fabric_test(self, node_a: str, node_b: str) -> tuple[dict[str, Any], str | None]:
        """Rail by rail between two nodes: the `fabric-test` step's result and its error."""
        ...

    async def plan(self, args: PlanArgs) -> StepOutcome:
        """The `plan` step's outcome on this fleet (the agents' claims read fresh): its result,
        and its error sentence when nothing fits.

        Raises:
            LlmgwError: the step's own refusals (an unknown model, no files to plan, …).
        """
        ...

    async def preview(self, args: ServeArgs) -> ServePreview | None:
        """What the `serve` step would start of `args`, per node (its dry run); None where the
        feed cannot say (a fixed fleet).

        Raises:
            LlmgwError: the step's refusals (a key variable not set, a refused flag, …).
        """
        ...

    async def downloaded_bytes(self, view: ReplicaView) -> dict[str, int]:
        """Per node, the bytes of the replica's Hub weights fetched so far."""
        ...

    async def replica_loads(self, views: tuple[ReplicaView, ...]) -> dict[str, ReplicaLoad]:
        """Each ready replica's engine as read now: its load, and its latency and tokens per
        second over the last minute (`serve.loads`); a replica it could not read is left out."""
        ...


def plan_body(outcome: StepOutcome) -> dict[str, Any]:
    """A `plan` outcome as the screens lay it out: the step's result, with `does_not_fit` the
    step's own sentence when nothing fits (None when something does)."""
    return {**outcome.result, "does_not_fit": None if outcome.ok else outcome.error}


def shard_prefix(rank: int, node: str) -> str:
    """`[r1 gpu-a-02] `: what each merged log line starts with."""
    return f"[r{rank} {node}] "


def running_shards(views: Iterable[ReplicaView]) -> dict[str, int]:
    """Per node, the shards of replicas still running there (the fleet's SHARDS column)."""
    counts: dict[str, int] = {}
    for view in views:
        for shard in view.live_shards():
            counts[shard.node] = counts.get(shard.node, 0) + 1
    return counts


def with_shards(summary: FleetSummary, counts: Mapping[str, int]) -> FleetSummary:
    """The summary with each node's running shards as the replicas say."""
    if not counts:
        return summary
    nodes = tuple(
        node
        if node.running_shards == counts.get(node.name, 0)
        else replace(node, running_shards=counts.get(node.name, 0))
        for node in summary.nodes
    )
    return replace(summary, nodes=nodes)
