"""The live feed: the fleet of an inventory, or the embedded demo, over SSH.

It opens the fleet on its first poll (SSH handshakes take seconds) so the
first frame never waits for it, hands the app one `FleetSummary` at a time
(the app never overlaps two polls), and makes every other call of
`FleetFeed` as one call into the core over the open fleet and its engine
tunnels, gateways included.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmgw_agent.ops import Op
from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.script.context import StepContext
from llmgw_core.views.fleet import FleetSummary, SummaryCache, fleet_summary
from llmgw_tui.feed.protocol import running_shards, shard_prefix, with_shards

if TYPE_CHECKING:
    from llmgw_core.metrics.families import MetricsSnapshot
    from llmgw_core.script.registry import StepOutcome
    from llmgw_core.script.steps.plan import PlanArgs
    from llmgw_core.script.steps.serve import ServeArgs
    from llmgw_core.serve.args import ServeFields
    from llmgw_core.serve.loads import LoadWatch, ReplicaLoad
    from llmgw_core.serve.prepare import ServePreview
    from llmgw_core.serve.start import ServeOutcome
    from llmgw_core.serve.view import ReplicaView
    from llmgw_core.service.spec import ServiceDoc
    from llmgw_core.views.clusters import ClusterSummary


LOG_TAIL_LINES = 500
"""Lines of a shard's log shown before following what it writes next."""

HEAL_EVERY_S = 10.0
"""How often the console tries again to place replicas that lost a node."""
SHARDS_EACH_POLL_NODES = 256
"""Up to this many ready nodes, every poll lists each node's shards."""
SHARDS_EVERY_S = 30.0
"""Above that, how often a poll lists them (2,048 listings take seconds of the console's loop)."""


class LiveFeed:
    """The fleet of an inventory, or the embedded demo fleet, over SSH."""

    def __init__(self, *, inventory: str | None, demo: bool, refresh_s: float = 2.0) -> None:
        self.refresh_s: float | None = refresh_s
        self._inventory = inventory
        self._demo = demo
        self._fleet: Any = None
        self._closer: Callable[[], Awaitable[None]] | None = None
        self._reach: Any = None
        self._loads: LoadWatch | None = None
        self._shards_by_node: dict[str, int] = {}
        self._heal_task: asyncio.Task[None] | None = None
        self._healed_at = 0.0
        self._rows = SummaryCache()
        self.heal_notes: list[dict[str, Any]] = []
        """What each heal attempt did (`replica_heal.heal`'s lines), oldest first."""
        self._views: tuple[ReplicaView, ...] = ()
        self._startup_figures: dict[str, dict[str, Any]] = {}
        """Per rank 0 shard, what its engine said of its memory once it had (read once)."""
        self._shards_at = -math.inf
        """When the shards of every node were last listed (monotonic seconds)."""
        self._fabrics: dict[str, tuple[str, ...]] | None = None

    async def snapshot(self) -> FleetSummary:
        """Open the fleet on first use, then read its current state (with running shards)."""
        if self._fleet is None:
            from llmgw_core.fleet.session import open_fleet

            self._fleet, self._closer = await open_fleet(inventory=self._inventory, demo=self._demo)
        if self._shards_due():
            with contextlib.suppress(LlmgwError):
                await self.replicas()  # the shards each node runs, for the SHARDS column
        else:
            self._heal_in_background()
        if self._fabrics is None:
            self._fabrics = inventory_fabrics(self._fleet.inventory)
        return await summary_off_loop(
            self._fleet.snapshot(), self._fabrics, self._rows, dict(self._shards_by_node)
        )

    def _shards_due(self) -> bool:
        """Whether this poll lists every node's shards (each poll on a small fleet).

        Above `SHARDS_EACH_POLL_NODES` ready nodes a listing costs the console
        seconds of its loop, so it runs every `SHARDS_EVERY_S`, and at the next
        poll after this console started or stopped a replica.
        """
        if self._fleet is None:
            return False
        if len(self._fleet.snapshot().ready()) <= SHARDS_EACH_POLL_NODES:
            return True
        return time.monotonic() - self._shards_at >= SHARDS_EVERY_S

    def _live(self) -> Any:
        if self._fleet is None:
            raise BadInput("the fleet is still connecting", "try again in a moment")
        return self._fleet

    def _engines(self) -> Any:
        from llmgw_core.serve.http import EngineReach

        if self._reach is None:
            self._reach = EngineReach(self._live())
        return self._reach

    async def replicas(self, *, transports: bool = False) -> tuple[ReplicaView, ...]:
        """Every replica reassembled from the nodes now; remembers shards per node for the fleet.

        With `transports`, each shard's NCCL transport is read from its log too, and
        what each engine said of its memory while it started.
        """
        from llmgw_core.serve.figures import with_all_figures
        from llmgw_core.serve.replicas import reconcile
        from llmgw_core.serve.transport import with_transports

        if self._fleet is None:
            return ()
        views = await reconcile(self._fleet)
        self._shards_at = time.monotonic()
        self._views = views
        self._shards_by_node = running_shards(views)
        self._heal_in_background()
        if not transports:
            return views
        views = await with_transports(self._fleet, views)
        return await with_all_figures(self._fleet, views, self._startup_figures)

    async def clusters(self) -> tuple[ClusterSummary, ...]:
        """Each inventory cluster read through its login node with the jobs on its nodes
        (`read_clusters_or_sentences`, the `clusters` step's reader), summarised by
        `views.clusters`; a login that fails is that cluster's sentence."""
        from llmgw_core.fleet.slurm_login import read_clusters_or_sentences
        from llmgw_core.views.clusters import cluster_summaries

        if self._fleet is None or not self._fleet.inventory.clusters:
            return ()
        fleet = self._fleet
        return cluster_summaries(
            await read_clusters_or_sentences(fleet.connector, fleet.inventory.clusters)
        )

    def cluster_names(self) -> tuple[str, ...]:
        """The inventory's clusters by name, once the fleet is open."""
        if self._fleet is None:
            return ()
        return tuple(cluster.name for cluster in self._fleet.inventory.clusters)

    async def slurm_jobs(self, views: tuple[ReplicaView, ...]) -> dict[str, dict[str, Any]]:
        """Each Slurm replica's job as the scheduler says now (`with_job_states`, as the
        `replicas` step reads it)."""
        from llmgw_core.fleet.slurm_jobs import with_job_states

        records = {
            view.name: {"slurm": dict(view.spec["slurm"])}
            for view in views
            if isinstance(view.spec.get("slurm"), dict) and view.spec["slurm"].get("job_id")
        }
        if self._fleet is None or not records:
            return {}
        await with_job_states(self._fleet, list(records.values()))
        return {name: record["slurm"] for name, record in records.items()}

    def _heal_in_background(self) -> None:
        """Place again, where there is room, what lost a node: one attempt at a time.

        The console is the process that stays: the replicas it watches come
        back when their node returns or another has room (`replica_heal.heal`,
        the same rule as `replicas: {heal: true}` in a script). A heal waits
        for the replica to answer, so it runs beside the refresh, never in it.
        """
        from llmgw_core.serve.heal import heal
        from llmgw_core.serve.replicas import NODE_GRACE_S

        now = time.monotonic()
        if self._heal_task is not None and not self._heal_task.done():
            return
        if now - self._healed_at < HEAL_EVERY_S:
            return
        self._healed_at = now

        async def attempt() -> None:
            try:
                healed = await heal(self._live(), self._engines(), grace_s=NODE_GRACE_S)
                self.heal_notes.extend(healed)
                if any(note.get("outcome") == "ready" for note in healed):
                    from llmgw_core.gateway.run import follow_all

                    await follow_all(self._live(), self._engines())  # gateways follow it
            except LlmgwError as exc:
                self.heal_notes.append(
                    {"name": None, "outcome": "failed", "reason": exc.sentence()}
                )

        self._heal_task = asyncio.get_running_loop().create_task(attempt())

    async def stop_replica(self, name: str) -> dict[str, Any]:
        """Stop every shard of `name` on the nodes that answer (`replicas.stop_replica`)."""
        from llmgw_core.gateway.run import follow_all
        from llmgw_core.serve.replicas import stop_replica

        stopped = await stop_replica(self._live(), name)
        self._shards_at = -math.inf  # the next poll lists shards again
        await follow_all(self._live(), self._engines())  # gateways drop its engine
        return stopped

    async def follow_logs(self, view: ReplicaView, rank: int | None) -> AsyncIterator[list[str]]:
        """The last lines of each wanted shard, then what they write next, merged as they come.

        One agent stream per shard feeds a queue; a stream that ends (its shard
        is over) or fails says so in a line of its own. Leaving the loop cancels
        every stream.
        """
        fleet = self._live()
        wanted = [s for s in view.shards if rank is None or s.rank == rank]
        queue: asyncio.Queue[list[str] | None] = asyncio.Queue()

        async def pump(node: str, shard_id: str, prefix: str) -> None:
            stream = None
            try:
                stream = fleet.client(node).stream(
                    Op.SHARD_LOGS, {"shard_id": shard_id, "tail": LOG_TAIL_LINES, "follow": True}
                )
                async for event in stream:
                    lines = event.get("lines") or []
                    if lines:
                        await queue.put([prefix + str(line) for line in lines])
            except (LlmgwError, OSError) as exc:
                await queue.put([f"{prefix}(its lines cannot be read: {exc})"])
            finally:
                if stream is not None:
                    with contextlib.suppress(LlmgwError):
                        await stream.cancel()
                await queue.put(None)

        pumps = [
            asyncio.ensure_future(
                pump(s.node, s.shard_id, shard_prefix(s.rank, s.node) if rank is None else "")
            )
            for s in wanted
        ]
        try:
            open_streams = len(pumps)
            while open_streams:
                batch = await queue.get()
                if batch is None:
                    open_streams -= 1
                    continue
                yield batch
        finally:
            for task in pumps:
                task.cancel()
            for task in pumps:
                with contextlib.suppress(asyncio.CancelledError, LlmgwError):
                    await task

    async def serve(self, args: ServeArgs) -> ServeOutcome:
        """The `serve` step's start of `args`: its request (`serve_request`: the weights fetched
        where a node lacks them, the key put in front), then plan, place, start and watch."""
        from llmgw_core.serve.slurm import serve_where_asked

        request, model = await self._request(args, name=args.name)
        outcome = await serve_where_asked(self._live(), self._engines(), request, model)
        self._shards_at = -math.inf  # the next poll lists shards again
        if outcome.phase == "ready":
            from llmgw_core.gateway.run import follow_all

            await follow_all(self._live(), self._engines())  # running gateways take it
        return outcome

    async def _request(self, args: ServeFields, *, name: str | None) -> tuple[Any, Any]:
        """`serve_request` as the steps make it, over the console's fleet, off the loop (the Hub
        may be read); a service's base request has no name (`name=None`)."""
        from llmgw_core.script.steps.serve import serve_request

        return await asyncio.to_thread(
            serve_request, args, ConsoleContext(self._live(), self._demo), name=name
        )

    async def apply_service(self, doc: ServiceDoc) -> dict[str, Any]:
        """`apply` the service `doc` as the step does, under its lease."""
        from llmgw_core.service.apply import apply_service

        base, model = await self._request(doc, name=None)
        result = await apply_service(self._live(), self._engines(), doc, base, model)
        self._shards_at = -math.inf  # the next poll lists shards again
        return result

    async def keep_service(self, name: str, on_event: Callable[[str], None]) -> dict[str, Any]:
        """`keep` service `name` as the step does, with the document its replicas carry."""
        from llmgw_core.service.keep import carried_document, keep_service

        fleet = self._live()
        doc = await carried_document(fleet, name)
        base, model = await self._request(doc, name=None)
        return await keep_service(fleet, self._engines(), doc, base, model, progress=on_event)

    async def replica_loads(self, views: tuple[ReplicaView, ...]) -> dict[str, ReplicaLoad]:
        """Each ready replica's engine read now, its last minute kept between reads."""
        from llmgw_core.serve.loads import LoadWatch, read_loads

        if self._fleet is None:
            return {}
        if self._loads is None:
            self._loads = LoadWatch()
        return await read_loads(self._engines(), views, self._loads)

    async def downloaded_bytes(self, view: ReplicaView) -> dict[str, int]:
        """Per node, the bytes of the replica's Hub weights fetched so far (while it starts)."""
        from llmgw_core.serve.start import hub_cache_dir

        repo = (view.spec.get("request") or {}).get("hub_repo")
        if not repo or view.phase not in ("starting", "loading") or self._fleet is None:
            return {}
        found: dict[str, int] = {}
        for node in sorted({s.node for s in view.shards}):
            stream = self._fleet.client(node).stream(
                Op.DOWNLOAD_WATCH, {"path": hub_cache_dir(repo), "interval_s": 2}
            )
            try:
                async for event in stream:
                    found[node] = int(event.get("bytes") or 0)
                    break
            except (LlmgwError, OSError):
                continue
            finally:
                with contextlib.suppress(LlmgwError):
                    await stream.cancel()
        return found

    async def plan(self, args: PlanArgs) -> StepOutcome:
        """`plan` as the step makes it on a live fleet: the nodes now, cards any claim holds
        marked busy (`fleet_for`), then `plan_outcome` off the loop (the Hub may be read)."""
        from llmgw_core.script.steps.plan import fleet_for, plan_outcome

        ctx = ConsoleContext(self._live(), self._demo)
        fleet = await fleet_for(ctx, args.cluster)  # a Slurm place: its partition
        return await asyncio.to_thread(plan_outcome, args, ctx, fleet)

    async def preview(self, args: ServeArgs) -> ServePreview | None:
        """What the `serve` step would start of `args`, per node, without starting it; None on
        a Slurm cluster, whose nodes are known only once its job runs (no dry run there)."""
        from llmgw_core.serve.prepare import preview_serve

        if args.cluster is not None:
            return None

        request, model = await self._request(args, name=args.name)
        return await preview_serve(self._live(), request, model)

    async def fabric_test(self, node_a: str, node_b: str) -> tuple[dict[str, Any], str | None]:
        """Rail by rail between two nodes, as the `fabric-test` step runs it.

        Returns:
            The step's result (`rails`, `counts`, `fabric`) and its error sentence (None: passed).
        """
        from llmgw_core.script.steps.fabric import FabricTestArgs, run_fabric_test

        outcome = await run_fabric_test(
            FabricTestArgs(nodes=[node_a, node_b]), ConsoleContext(self._live(), self._demo)
        )
        return outcome.result, outcome.error

    async def metrics_snapshot(self) -> MetricsSnapshot:
        """The fleet and replicas as the poller last read them, and the gateways scraped now."""
        from llmgw_core.gateway.run import gateways_now
        from llmgw_core.metrics.gateway import targets_of
        from llmgw_core.metrics.sources import gather_snapshot

        snapshot, _unread = await gather_snapshot(
            self._live(),
            self._engines(),
            gateways=targets_of(await gateways_now(self._live())),
            replicas=self._views,
        )
        return snapshot

    async def ask(self, view: ReplicaView, prompt: str) -> str:
        """Rank 0's chat answer to `prompt`, with the key the replica was started with."""
        from llmgw_core.serve.http import chat, engine_tls
        from llmgw_core.serve.keys import client_key

        node, port, served = view.ready_engine()
        key = client_key(None, view.api_key_env)
        answer = await chat(
            self._engines(),
            node,
            port,
            served,
            prompt,
            api_key=key,
            host=view.http_host,
            tls=engine_tls(view.tls_cert),
        )
        return answer.text

    async def bench(self, view: ReplicaView) -> dict[str, Any]:
        """Sixteen completions, four at a time: tokens a second and latency."""
        from llmgw_core.serve.http import bench, engine_tls
        from llmgw_core.serve.keys import client_key

        node, port, served = view.ready_engine()
        key = client_key(None, view.api_key_env)
        return await bench(
            self._engines(),
            node,
            port,
            served,
            requests=16,
            concurrency=4,
            api_key=key,
            host=view.http_host,
            tls=engine_tls(view.tls_cert),
        )

    async def refresh(self) -> None:
        """Ask every ready node for its facts again (the fleet never overlaps two refreshes)."""
        if self._fleet is not None:
            await self._fleet.refresh()

    async def doctor(self, node: str) -> list[dict[str, str]]:
        """Ask the node's agent to run its doctor (as the `doctor` step does)."""
        from llmgw_core.errors import BadInput
        from llmgw_core.script.steps.doctor import DOCTOR_TIMEOUT_S, checks_of

        if self._fleet is None:
            raise BadInput("the fleet is still connecting", "try again in a moment")
        raw = await self._fleet.request(node, Op.DOCTOR, timeout_s=DOCTOR_TIMEOUT_S)
        return checks_of(raw)

    async def close(self) -> None:
        """Close every connection, and stop the demo fleet if this feed started it."""
        if self._heal_task is not None:
            self._heal_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, LlmgwError):
                await self._heal_task
        closer, self._closer, self._fleet = self._closer, None, None
        reach, self._reach = self._reach, None
        if reach is not None:
            from llmgw_core.serve.http import close_quietly

            await close_quietly(reach)
        if closer is not None:
            await closer()

    # --- gateways: one call into the core each (`gateway.run`, `metrics.gateway`) ---

    async def gateways(self) -> list[dict[str, Any]]:
        """Every running gateway with its front's workers (`gateway.run.gateway_summaries`)."""
        from llmgw_core.gateway.run import gateway_summaries

        return await gateway_summaries(self._live(), self._engines())

    async def put_behind_gateway(self, name: str, api_key_env: str | None = None) -> dict[str, Any]:
        """Start the gateway `name` on its default node, clients keyed by the replica's own
        variable, or make the running one follow (`gateway_key_warning` says when it runs
        open in front of a keyed replica)."""
        from llmgw_core.gateway.run import gateway_key_warning, start_gateway
        from llmgw_core.gateway.spec import GatewayArgs

        started = await start_gateway(
            self._live(),
            self._engines(),
            GatewayArgs(name=name, api_key_env=api_key_env),
            any_port=True,
        )
        warning = gateway_key_warning(started, api_key_env)
        if warning:
            started["warnings"] = [*started.get("warnings", []), warning]
        return started

    async def follow_gateway_logs(self, name: str) -> AsyncIterator[list[str]]:
        """The gateway's last lines, then what it writes next (`gateway.run.gateway_log_batches`)."""
        from llmgw_core.gateway.run import gateway_log_batches

        batches = gateway_log_batches(self._live(), name, lines=LOG_TAIL_LINES, follow=True)
        try:
            async for batch in batches:
                yield batch
        finally:
            await batches.aclose()

    async def gateway_details(self) -> list[dict[str, Any]]:
        """Every running gateway, its workers and its front's counts (`metrics.gateway`)."""
        from llmgw_core.metrics.gateway import gateway_details

        return await gateway_details(self._live(), self._engines())

    async def gateway_usage(self, name: str) -> dict[str, Any]:
        """What each key used, from the front's access log (`gateway.run.gateway_usage`)."""
        from llmgw_core.gateway.run import gateway_usage

        return await gateway_usage(self._live(), name)

    async def stop_gateway(self, name: str) -> dict[str, Any]:
        """Stop and forget the gateway (`gateway.run.stop_gateway`)."""
        from llmgw_core.gateway.run import stop_gateway

        return await stop_gateway(self._live(), name)


async def summary_off_loop(
    state: Any,
    fabrics: Mapping[str, Iterable[str]],
    cache: SummaryCache,
    shards: Mapping[str, int],
) -> FleetSummary:
    """The fleet summary of a snapshot (with running shards), computed in a worker thread.

    A big fleet's first summary takes seconds of CPU; on the UI loop it would
    hold every key until done. The caller never shares `cache` between
    two calls at once (the app never overlaps two polls).
    """
    return await asyncio.to_thread(
        lambda: with_shards(fleet_summary(state, fabrics, cache), shards)
    )


def inventory_fabrics(inventory: Any) -> dict[str, tuple[str, ...]]:
    """Each node's fabric names, as the operator's inventory gives them."""
    return {
        spec.name: tuple(fabric.name for fabric in spec.fabrics) for spec in inventory.node_specs()
    }


class ConsoleContext(StepContext):
    """A step context over the console's own open fleet (a step run from a screen)."""

    def __init__(self, fleet: Any, demo: bool) -> None:
        super().__init__(script_dir=Path.cwd(), described_fleet=None, inventory=None, demo=demo)
        self._console_fleet = fleet

    @property
    def has_live_fleet(self) -> bool:
        """Always: the console's fleet is open, an inventory's as much as the demo's."""
        return True

    async def live_fleet(self) -> Any:
        """The console's fleet, already open (the console closes it)."""
        return self._console_fleet
