"""A feed of a fleet that never changes: tests and screenshots, built from real agent facts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llmgw_core.errors import BadInput
from llmgw_core.views.fleet import FleetSummary, fleet_summary
from llmgw_tui.feed.protocol import running_shards, shard_prefix, with_shards

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


class StaticFeed:
    """A fleet that never changes: tests and screenshots, built from real agent facts."""

    def __init__(
        self,
        fleet_state: Any,
        fabrics: Mapping[str, Iterable[str]] | None = None,
        *,
        replicas: Sequence[ReplicaView] = (),
        logs: Mapping[str, Sequence[str]] | None = None,
        fabric_results: Mapping[tuple[str, str], tuple[dict[str, Any], str | None]] | None = None,
        loads: Mapping[str, ReplicaLoad] | None = None,
    ) -> None:
        self.refresh_s: float | None = None
        self._fabric_results = dict(fabric_results or {})
        self._summary = with_shards(fleet_summary(fleet_state, fabrics), running_shards(replicas))
        self._replicas = tuple(replicas)
        self._logs = dict(logs or {})
        self._loads = dict(loads or {})

    async def replicas(self, *, transports: bool = False) -> tuple[ReplicaView, ...]:
        """The replicas the fixed fleet was given (as given: their transports included)."""
        return self._replicas

    async def stop_replica(self, name: str) -> dict[str, Any]:
        """A fixed fleet runs nothing it could stop."""
        raise BadInput(f"{name} runs on a fixed fleet", "stop it on a live fleet")

    async def follow_logs(self, view: ReplicaView, rank: int | None) -> AsyncIterator[list[str]]:
        """The fixed lines given per shard id, in one batch per shard."""
        for shard in view.shards:
            if rank is None or shard.rank == rank:
                prefix = shard_prefix(shard.rank, shard.node) if rank is None else ""
                yield [prefix + line for line in self._logs.get(shard.shard_id, ())]

    async def gateways(self) -> list[dict[str, Any]]:
        """A fixed fleet runs no gateway."""
        return []

    async def put_behind_gateway(self, name: str, api_key_env: str | None = None) -> dict[str, Any]:
        """A fixed fleet starts nothing."""
        raise BadInput("a fixed fleet starts nothing", "run the console with --demo or --inventory")

    async def follow_gateway_logs(self, name: str) -> AsyncIterator[list[str]]:
        """A fixed fleet runs no gateway, so it has no gateway log."""
        raise BadInput(f"no gateway is named {name!r}", "a fixed fleet runs no gateway")
        yield []  # an async generator, as the live feed's

    async def gateway_details(self) -> list[dict[str, Any]]:
        """A fixed fleet runs no gateway."""
        return []

    async def gateway_usage(self, name: str) -> dict[str, Any]:
        """A fixed fleet runs no gateway, so none has used anything."""
        raise BadInput(f"no gateway is named {name!r}", "a fixed fleet runs no gateway")

    async def stop_gateway(self, name: str) -> dict[str, Any]:
        """A fixed fleet runs no gateway to stop."""
        raise BadInput(f"no gateway is named {name!r}", "a fixed fleet runs no gateway")

    async def serve(self, args: ServeArgs) -> ServeOutcome:
        """A fixed fleet starts nothing."""
        raise BadInput("a fixed fleet starts nothing", "run the console with --demo or --inventory")

    async def ask(self, view: ReplicaView, prompt: str) -> str:
        """A fixed fleet has no engine to ask."""
        raise BadInput(f"{view.name} runs on a fixed fleet", "ask it on a live fleet")

    async def bench(self, view: ReplicaView) -> dict[str, Any]:
        """A fixed fleet has no engine to measure."""
        raise BadInput(f"{view.name} runs on a fixed fleet", "bench it on a live fleet")

    async def apply_service(self, doc: ServiceDoc) -> dict[str, Any]:
        """A fixed fleet starts nothing."""
        raise BadInput("a fixed fleet starts nothing", "run the console with --demo or --inventory")

    async def keep_service(self, name: str, on_event: Callable[[str], None]) -> dict[str, Any]:
        """A fixed fleet runs no service."""
        raise BadInput(
            "a fixed fleet runs no service", "run the console with --demo or --inventory"
        )

    async def plan(self, args: PlanArgs) -> StepOutcome:
        """`plan_outcome` on the fixed fleet's nodes (it has no claims: cards are busy by what
        they report), the model read offline as in the demo."""
        import asyncio
        from pathlib import Path

        from llmgw_core.planner.pools_live import live_nodes, planner_fleet
        from llmgw_core.script.context import StepContext
        from llmgw_core.script.steps.plan import plan_outcome

        summary = self._summary
        fleet = planner_fleet(live_nodes(summary.fleet_state, summary.fabrics or {}))
        ctx = StepContext(script_dir=Path.cwd(), described_fleet=None, inventory=None, demo=True)
        return await asyncio.to_thread(plan_outcome, args, ctx, fleet)

    async def preview(self, args: ServeArgs) -> ServePreview | None:
        """None: a fixed fleet has no agents to ask what would start."""
        return None

    async def downloaded_bytes(self, view: ReplicaView) -> dict[str, int]:
        """Nothing is fetched on a fixed fleet."""
        return {}

    async def replica_loads(self, views: tuple[ReplicaView, ...]) -> dict[str, ReplicaLoad]:
        """The loads the fixed fleet was given (a recorded minute), for the replicas listed."""
        return {v.name: self._loads[v.name] for v in views if v.name in self._loads}

    async def fabric_test(self, node_a: str, node_b: str) -> tuple[dict[str, Any], str | None]:
        """The result given for this pair (a recorded run); a fixed fleet runs no traffic itself."""
        recorded = self._fabric_results.get((node_a, node_b))
        if recorded is None:
            raise BadInput("a fixed fleet runs no traffic", "test the fabric on a live fleet")
        return recorded

    async def metrics_snapshot(self) -> MetricsSnapshot:
        """The fixed fleet (its facts carry the fabric verdicts its nodes keep) and its replicas."""
        from llmgw_core.metrics.families import MetricsSnapshot

        state = self._summary.fleet_state
        if state is None:
            raise BadInput("a fixed fleet without a snapshot has nothing to export")
        return MetricsSnapshot(fleet=state, replicas=self._replicas)

    async def snapshot(self) -> FleetSummary:
        """The one fixed snapshot."""
        return self._summary

    async def refresh(self) -> None:
        """A fixed fleet has nothing to re-read."""

    async def clusters(self) -> tuple[ClusterSummary, ...]:
        """A fixed fleet has no Slurm cluster."""
        return ()

    def cluster_names(self) -> tuple[str, ...]:
        """A fixed fleet has no Slurm cluster."""
        return ()

    async def slurm_jobs(self, views: tuple[ReplicaView, ...]) -> dict[str, dict[str, Any]]:
        """A fixed fleet has no scheduler to ask."""
        return {}

    async def doctor(self, node: str) -> list[dict[str, str]]:
        """The agent's own checks over the node's facts, run here (no node to ask)."""
        from llmgw_agent.doctor import run_checks
        from llmgw_core.errors import BadInput
        from llmgw_core.views.fleet import facts_mapping

        state = self._summary.fleet_state
        known = state.nodes.get(node) if state is not None else None
        if known is None or known.facts is None:
            raise BadInput(f"no facts for {node!r} to check", "pick a node of the fleet")
        return list(run_checks(dict(facts_mapping(known.facts))))

    async def close(self) -> None:
        """Nothing to release."""
