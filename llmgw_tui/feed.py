"""Where the console's fleet snapshots come from: the live fleet, or a fixed one for tests.

A feed hands the app one `FleetSummary` at a time; the app polls it from a
worker and never overlaps two polls. The live feed opens the fleet on its first
poll (SSH handshakes take seconds) so the first frame never waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.script.context import StepContext
from llmgw_core.views.fleet import FleetSummary, SummaryCache, fleet_summary
from llmgw_tui.feed_gateways import LOG_TAIL_LINES, LiveGateways

if TYPE_CHECKING:
    from llmgw_core.metrics.families import MetricsSnapshot
    from llmgw_core.serve.prepare import ServePreview
    from llmgw_core.serve.start import ServeOutcome, ServeRequest
    from llmgw_core.serve.view import ReplicaView


class FleetFeed(Protocol):
    """A source of fleet snapshots."""

    refresh_s: float | None
    """Seconds between polls; None polls once (a fixed fleet)."""

    async def snapshot(self) -> FleetSummary:
        """The fleet as it is now."""
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

    async def serve(self, request: ServeRequest) -> ServeOutcome:
        """Bring `request.model` up on the fleet and wait until it answers."""
        ...

    async def ask(self, view: ReplicaView, prompt: str) -> str:
        """One chat answer of a ready replica."""
        ...

    async def gateways(self) -> list[dict[str, Any]]:
        """Every running gateway: `GatewayView.as_dict()` with its router's `workers`."""
        ...

    async def put_behind_gateway(self, name: str) -> dict[str, Any]:
        """Start (or adopt) the gateway `name` in front of every ready replica."""
        ...

    def follow_gateway_logs(self, name: str) -> AsyncIterator[list[str]]:
        """Batches of the gateway's router log (`[gateway node] …`), followed live."""
        ...

    async def gateway_details(self) -> list[dict[str, Any]]:
        """Every running gateway with its workers' health and its router's counts."""
        ...

    async def stop_gateway(self, name: str) -> dict[str, Any]:
        """Stop and forget the gateway `name` (the `stop` step's answer)."""
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

    async def preview(self, request: ServeRequest) -> ServePreview | None:
        """What `serve` would start, per node; None where the feed cannot say (a fixed fleet)."""
        ...

    async def downloaded_bytes(self, view: ReplicaView) -> dict[str, int]:
        """Per node, the bytes of the replica's Hub weights fetched so far."""
        ...


def shard_prefix(rank: int, node: str) -> str:
    """`[r1 gpu-a-02] `: what each merged log line starts with."""
    return f"[r{rank} {node}] "


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
    ) -> None:
        self.refresh_s: float | None = None
        self._fabric_results = dict(fabric_results or {})
        self._summary = with_shards(fleet_summary(fleet_state, fabrics), running_shards(replicas))
        self._replicas = tuple(replicas)
        self._logs = dict(logs or {})

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

    async def put_behind_gateway(self, name: str) -> dict[str, Any]:
        """A fixed fleet starts nothing."""
        raise BadInput("a fixed fleet starts nothing", "run the console with --demo or --inventory")

    async def follow_gateway_logs(self, name: str) -> AsyncIterator[list[str]]:
        """A fixed fleet runs no gateway, so it has no router log."""
        raise BadInput(f"no gateway is named {name!r}", "a fixed fleet runs no gateway")
        yield []  # an async generator, as the live feed's

    async def gateway_details(self) -> list[dict[str, Any]]:
        """A fixed fleet runs no gateway."""
        return []

    async def stop_gateway(self, name: str) -> dict[str, Any]:
        """A fixed fleet runs no gateway to stop."""
        raise BadInput(f"no gateway is named {name!r}", "a fixed fleet runs no gateway")

    async def serve(self, request: ServeRequest) -> ServeOutcome:
        """A fixed fleet starts nothing."""
        raise BadInput("a fixed fleet starts nothing", "run the console with --demo or --inventory")

    async def ask(self, view: ReplicaView, prompt: str) -> str:
        """A fixed fleet has no engine to ask."""
        raise BadInput(f"{view.name} runs on a fixed fleet", "ask it on a live fleet")

    async def bench(self, view: ReplicaView) -> dict[str, Any]:
        """A fixed fleet has no engine to measure."""
        raise BadInput(f"{view.name} runs on a fixed fleet", "bench it on a live fleet")

    async def preview(self, request: ServeRequest) -> ServePreview | None:
        """None: a fixed fleet has no agents to ask what would start."""
        return None

    async def downloaded_bytes(self, view: ReplicaView) -> dict[str, int]:
        """Nothing is fetched on a fixed fleet."""
        return {}

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


HEAL_EVERY_S = 10.0
"""How often the console tries again to place replicas that lost a node."""
SHARDS_EACH_POLL_NODES = 256
"""Up to this many ready nodes, every poll lists each node's shards."""
SHARDS_EVERY_S = 30.0
"""Above that, how often a poll lists them (2,048 listings take seconds of the console's loop)."""


class LiveFeed(LiveGateways):
    """The fleet of an inventory, or the embedded demo fleet, over SSH."""

    def __init__(self, *, inventory: str | None, demo: bool, refresh_s: float = 2.0) -> None:
        self.refresh_s: float | None = refresh_s
        self._inventory = inventory
        self._demo = demo
        self._fleet: Any = None
        self._closer: Callable[[], Awaitable[None]] | None = None
        self._reach: Any = None
        self._shards_by_node: dict[str, int] = {}
        self._heal_task: asyncio.Task[None] | None = None
        self._healed_at = 0.0
        self._rows = SummaryCache()
        self.heal_notes: list[dict[str, Any]] = []
        """What each heal attempt did (`replica_heal.heal`'s lines), oldest first."""
        self._views: tuple[ReplicaView, ...] = ()
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

        With `transports`, each shard's NCCL transport is read from its log too.
        """
        from llmgw_core.serve.replicas import reconcile
        from llmgw_core.serve.transport import with_transports

        if self._fleet is None:
            return ()
        views = await reconcile(self._fleet)
        self._shards_at = time.monotonic()
        self._views = views
        self._shards_by_node = running_shards(views)
        self._heal_in_background()
        return await with_transports(self._fleet, views) if transports else views

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
                    "shard.logs", {"shard_id": shard_id, "tail": LOG_TAIL_LINES, "follow": True}
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

    async def serve(self, request: ServeRequest) -> ServeOutcome:
        """Plan, place, start and watch `request` as the `serve` step does."""
        from llmgw_core.script.steps.plan import model_for
        from llmgw_core.serve.start import serve

        model = await asyncio.to_thread(
            model_for, request.model, Path.cwd(), offline=self._offline()
        )
        outcome = await serve(self._live(), self._engines(), request, model)
        self._shards_at = -math.inf  # the next poll lists shards again
        if outcome.phase == "ready":
            from llmgw_core.gateway.run import follow_all

            await follow_all(self._live(), self._engines())  # running gateways take it
        return outcome

    def _offline(self) -> bool | None:
        return True if self._demo else None

    async def downloaded_bytes(self, view: ReplicaView) -> dict[str, int]:
        """Per node, the bytes of the replica's Hub weights fetched so far (while it starts)."""
        from llmgw_core.serve.start import hub_cache_dir

        repo = (view.spec.get("request") or {}).get("hub_repo")
        if not repo or view.phase not in ("starting", "loading") or self._fleet is None:
            return {}
        found: dict[str, int] = {}
        for node in sorted({s.node for s in view.shards}):
            stream = self._fleet.client(node).stream(
                "download.watch", {"path": hub_cache_dir(repo), "interval_s": 2}
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

    async def preview(self, request: ServeRequest) -> ServePreview | None:
        """What `serve` would start, per node, without starting it (`preview_serve`)."""
        from llmgw_core.script.steps.plan import model_for
        from llmgw_core.serve.prepare import preview_serve

        model = await asyncio.to_thread(
            model_for, request.model, Path.cwd(), offline=self._offline()
        )
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
        """Rank 0's chat answer to `prompt`."""
        from llmgw_core.serve.http import chat

        node, port, served = view.ready_engine()
        answer = await chat(self._engines(), node, port, served, prompt)
        return answer.text

    async def bench(self, view: ReplicaView) -> dict[str, Any]:
        """Sixteen completions, four at a time: tokens a second and latency."""
        from llmgw_core.serve.http import bench

        node, port, served = view.ready_engine()
        return await bench(self._engines(), node, port, served, requests=16, concurrency=4)

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
        raw = await self._fleet.request(node, "doctor", timeout_s=DOCTOR_TIMEOUT_S)
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


def running_shards(views: Iterable[ReplicaView]) -> dict[str, int]:
    """Per node, the shards of replicas still running there (the fleet's SHARDS column)."""
    counts: dict[str, int] = {}
    for view in views:
        for shard in view.live_shards():
            counts[shard.node] = counts.get(shard.node, 0) + 1
    return counts


def inventory_fabrics(inventory: Any) -> dict[str, tuple[str, ...]]:
    """Each node's fabric names, as the operator's inventory gives them."""
    return {
        spec.name: tuple(fabric.name for fabric in spec.fabrics) for spec in inventory.node_specs()
    }


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


class ConsoleContext(StepContext):
    """A step context over the console's own open fleet (a step run from a screen)."""

    def __init__(self, fleet: Any, demo: bool) -> None:
        super().__init__(script_dir=Path.cwd(), described_fleet=None, inventory=None, demo=demo)
        self._console_fleet = fleet

    async def live_fleet(self) -> Any:
        """The console's fleet, already open (the console closes it)."""
        return self._console_fleet
