"""The live fleet: one connection and one agent per node, and an honest picture of them.

Every node gets its own task that connects, deploys the agent when missing,
starts it on one channel, reads its facts and then re-reads them every
`refresh_interval_s` (fabric states change: a fabric manager restart drops
every card of a tray at once). A node that drops is marked unreachable with
the reason and retried with a growing backoff, so one that comes back is
picked up again without anyone asking. Refreshes of one node never overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import asyncssh

from llmgw_agent.ops import Op
from llmgw_core.cancelling import cancel_and_wait
from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.facts import NodeFacts, parse_facts
from llmgw_core.fleet.checks import fabric_problem
from llmgw_core.fleet.client import AgentAbsent, AgentClient, AgentLost
from llmgw_core.fleet.deploy import NodeUnfit, agent_command, ensure_agent, serve_command
from llmgw_core.fleet.ssh import HostKeyRefused, SshConnector, SshTarget
from llmgw_core.fleet.state import FleetState, NodeState, NodeStatus
from llmgw_core.inventory import Inventory, NodeSpec

FACTS_TIMEOUT_S = 60.0
PUBLISH_WINDOW_S = 0.1
"""Listeners and waiters hear of changes at most once per this moment (all of them together)."""
PUBLISH_WINDOW_S_PER_NODE = 50e-6
"""A small fleet's window is shorter: a snapshot costs in proportion to the nodes it holds, so
the window does too, up to `PUBLISH_WINDOW_S`."""

Listener = Callable[[FleetState], None]


class FactsRejected(LlmgwError):
    """A node's facts do not validate: we will not plan with them."""


def validate_facts(raw: Any, node: str) -> NodeFacts:
    """The agent's facts checked against the core's models (`llmgw_core.facts`).

    Raises:
        FactsRejected: naming the node and the first field that is wrong.
    """
    try:
        return parse_facts(raw, node)
    except BadInput as exc:
        raise FactsRejected(exc.message, exc.fix) from None


class _Node:
    """The mutable side of one node; the fleet publishes it as `NodeState`."""

    def __init__(self, spec: NodeSpec) -> None:
        self.spec = spec
        self.state = NodeState(name=spec.name, address=_address(spec))
        self.connection: asyncssh.SSHClientConnection | None = None
        self.client: AgentClient | None = None
        self.refresh_lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.leaving = False
        """Set when the fleet leaves this node alone (a Slurm job's node): its loops end as they
        do on `Fleet._closing`, where a cancellation `wait_for` lost would leave them running."""


def _address(spec: NodeSpec) -> str:
    where = spec.host if spec.port is None else f"{spec.host}:{spec.port}"
    return f"{spec.user}@{where}" if spec.user else where


class Fleet:
    """Connections to every node of an inventory, kept up, with snapshots of what they say."""

    def __init__(
        self,
        inventory: Inventory,
        connector: SshConnector,
        *,
        refresh_interval_s: float = 60.0,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 30.0,
    ) -> None:
        self.inventory = inventory
        self.connector = connector
        self.refresh_interval_s = refresh_interval_s
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self._nodes = {spec.name: _Node(spec) for spec in inventory.node_specs()}
        self._listeners: list[Listener] = []
        self._changed = asyncio.Condition()
        self._snapshot = self._take_snapshot()
        self._stale = False
        self._pending = False
        self._publishing: asyncio.Task[None] | None = None
        self._publish_window_s = min(PUBLISH_WINDOW_S, PUBLISH_WINDOW_S_PER_NODE * len(self._nodes))
        self._published_at = -PUBLISH_WINDOW_S
        self._closing = False
        self._started = False
        self.job_listings: dict[str, list[dict[str, Any]]] = {}
        """Each Slurm job node's last shard listing: what its replica was, once its job ends."""
        self.jobs_ended: dict[str, str] = {}
        """Each Slurm job node whose job has ended: the scheduler's words for it."""
        self._wait_for_agents_on_close = True

    # --- the picture ----------------------------------------------------

    def snapshot(self) -> FleetState:
        """The fleet as last seen (immutable); taken anew only after a change."""
        if self._stale:
            self._stale = False
            self._snapshot = self._take_snapshot()
        return self._snapshot

    def add_listener(self, listener: Listener) -> None:
        """Call `listener(snapshot)` after every change (on the event loop)."""
        self._listeners.append(listener)

    def _take_snapshot(self) -> FleetState:
        # Every NodeState was validated when it was made: validating 2,048 of
        # them again per snapshot was most of the console's CPU during discovery.
        return FleetState.model_construct(
            taken_at=datetime.now(UTC),
            nodes={name: node.state for name, node in self._nodes.items()},
        )

    async def _set(self, node: _Node, **changes: Any) -> None:
        node.state = node.state.model_copy(update=changes)
        self._stale = True
        self._pending = True
        if self._publishing is None or self._publishing.done():
            self._publishing = asyncio.ensure_future(self._publish())

    async def _publish(self) -> None:
        """Tell listeners and waiters, once for the changes of a short moment.

        At 2,048 nodes discovery makes thousands of changes; a snapshot (and
        every waiter's predicate) per change was quadratic, seconds of CPU.
        A change after a quiet moment goes out on the next turn of the loop
        (the last node of a discovery settles it at once, not a window later);
        changes that follow within the window wait for its end, together.
        """
        while self._pending:
            self._pending = False
            loop = asyncio.get_running_loop()
            wait_s = self._published_at + self._publish_window_s - loop.time()
            await asyncio.sleep(max(0.0, wait_s))
            self._published_at = loop.time()
            snapshot = self.snapshot()
            for listener in list(self._listeners):
                listener(snapshot)
            async with self._changed:
                self._changed.notify_all()

    async def wait_for(
        self, predicate: Callable[[FleetState], bool], timeout_s: float | None = None
    ) -> FleetState:
        """Wait until a snapshot satisfies `predicate`; returns that snapshot.

        Raises:
            TimeoutError: when it does not happen within `timeout_s`.
        """

        async def wait() -> FleetState:
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self.snapshot()))
                return self.snapshot()

        return await asyncio.wait_for(wait(), timeout_s)

    async def wait_settled(self, timeout_s: float | None = None) -> FleetState:
        """Wait until every node has been tried once (none still `connecting`)."""
        return await self.wait_for(lambda snapshot: snapshot.settled(), timeout_s)

    # --- running ----------------------------------------------------------

    async def start(self) -> None:
        """Start every node's task; returns at once (watch `snapshot()` / listeners)."""
        self._started = True
        for node in self._nodes.values():
            if node.task is None:
                node.task = asyncio.ensure_future(self._keep_up(node))

    async def close(self, *, wait_for_agents: bool = True) -> None:
        """Stop every task and close every agent and connection.

        `wait_for_agents=False` (a headless run ending) does not wait for each
        agent to exit: its channel gets end of input, then its connection is
        closed, and the agent exits on its node as it does when a link drops;
        waiting for each to exit would add to every run's end.
        """
        self._closing = True
        self._wait_for_agents_on_close = wait_for_agents
        tasks = [node.task for node in self._nodes.values() if node.task is not None]
        if self._publishing is not None:
            tasks.append(self._publishing)
        await cancel_and_wait(*tasks)
        await asyncio.gather(*(self._disconnect(node) for node in self._nodes.values()))
        await self.connector.close()

    def add_job_nodes(self, specs: list[NodeSpec]) -> None:
        """Join the nodes of a running Slurm job (`NodeSpec.relay`): each is connected and
        watched like an inventory node from now on, and `inventory.node_specs()` lists it."""
        fresh = [spec for spec in specs if spec.name not in self._nodes]
        for spec in fresh:
            self._nodes[spec.name] = _Node(spec)
        kept = tuple(s for s in self.inventory.node_specs() if s.relay is not None)
        self.inventory = self.inventory.with_job_nodes(kept + tuple(fresh))
        self._stale = True
        if self._started:
            for spec in fresh:
                node = self._nodes[spec.name]
                node.task = asyncio.ensure_future(self._keep_up(node))

    async def remove_job_nodes(self, names: list[str]) -> None:
        """Leave the nodes of a Slurm job that ended: their agents went with the job."""
        gone = [self._nodes.pop(name) for name in names if name in self._nodes]
        for name in names:
            self.job_listings.pop(name, None)
            self.jobs_ended.pop(name, None)
        for node in gone:
            node.leaving = True  # a node whose cancel was lost ends at its loop's next turn
            node.wake.set()
        await cancel_and_wait(*(node.task for node in gone if node.task is not None))
        await asyncio.gather(*(self._disconnect(node) for node in gone))
        kept = tuple(
            s for s in self.inventory.node_specs() if s.relay is not None and s.name in self._nodes
        )
        self.inventory = self.inventory.with_job_nodes(kept)
        self._stale = True
        self._pending = True
        if self._publishing is None or self._publishing.done():
            self._publishing = asyncio.ensure_future(self._publish())

    def reconnect_now(self, name: str | None = None) -> None:
        """Cut the backoff short: retry one node (or every one) at once."""
        for node in self._nodes.values() if name is None else [self._node(name)]:
            node.wake.set()

    def _node(self, name: str) -> _Node:
        try:
            return self._nodes[name]
        except KeyError:
            names = ", ".join(self._nodes)
            raise LlmgwError(f"no node is named {name!r}", f"the nodes are {names}") from None

    def client(self, name: str) -> AgentClient:
        """The agent channel of a ready node.

        Raises:
            LlmgwError: the node is not ready, with its state and reason.
        """
        node = self._node(name)
        if node.client is None or not node.client.is_open or node.state.state != "ready":
            why = f": {node.state.reason}" if node.state.reason else ""
            raise AgentLost(f"{name} is {node.state.state}{why}")
        return node.client

    def connection(self, name: str) -> asyncssh.SSHClientConnection:
        """The live SSH connection of a ready node (for tunnels and file copies).

        It is the fleet's: do not close it. It goes away when the node is lost;
        ask again after it is ready.

        Raises:
            AgentLost: the node is not ready, with its state and reason.
        """
        node = self._node(name)
        self.client(name)  # the same readiness rule
        assert node.connection is not None
        return node.connection

    async def request(
        self, name: str, op: str, args: dict[str, Any] | None = None, *, timeout_s: float = 60.0
    ) -> Any:
        """One request to a ready node's agent."""
        return await self.client(name).request(op, args, timeout_s=timeout_s)

    async def refresh(self, name: str | None = None) -> FleetState:
        """Re-read the facts of one ready node (or all) now; never overlaps a refresh."""
        nodes = [
            node
            for node in (self._nodes.values() if name is None else [self._node(name)])
            if node.client is not None
        ]
        outcomes = await asyncio.gather(
            *(self._refresh(node) for node in nodes), return_exceptions=True
        )
        for node, outcome in zip(nodes, outcomes, strict=True):
            if isinstance(outcome, LlmgwError):
                # The node's own task reconnects if the channel is gone; say what happened.
                await self._set(node, reason=f"refreshing failed: {outcome.sentence()}")
            elif isinstance(outcome, BaseException):
                raise outcome
        if self._publishing is not None and not self._publishing.done():
            await asyncio.shield(self._publishing)  # listeners have seen it when we return
        return self.snapshot()

    async def _keep_up(self, node: _Node) -> None:
        """Connect, serve, and reconnect with backoff, until the fleet closes."""
        failures = 0
        while not (self._closing or node.leaving):
            try:
                await self._connect(node)
                failures = 0
                await self._serve(node)
            except HostKeyRefused as exc:
                await self._set(node, state="refused", reason=exc.sentence())
            except NodeUnfit as exc:
                await self._set(node, state="refused", reason=exc.sentence())
            except FactsRejected as exc:
                await self._set(node, state="refused", reason=exc.sentence())
            except (LlmgwError, asyncssh.Error, OSError) as exc:
                reason = exc.sentence() if isinstance(exc, LlmgwError) else str(exc)
                if node.spec.relay is not None:
                    ended = await self._job_ended(node.spec)
                    if ended is not None:
                        self.jobs_ended[node.spec.name] = reason = ended
                await self._set(node, state="unreachable", reason=reason)
            finally:
                await self._disconnect(node)
            if self._closing or node.leaving:
                return  # a cancellation `wait_for` lost (see `_serve`) ends here too
            failures += 1
            delay_s = min(self.retry_max_s, self.retry_initial_s * 2 ** (failures - 1))
            node.wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(node.wake.wait(), delay_s)

    async def _job_ended(self, spec: NodeSpec) -> str | None:
        """Why a Slurm job's node went, in the scheduler's words, when its job has ended (a
        cancel, a time limit, a preemption, a node failure); None while the job runs."""
        from llmgw_core.fleet.slurm_jobs import job_end_reason

        try:
            return await job_end_reason(self, spec)
        except (LlmgwError, asyncssh.Error, OSError):
            return None  # the login node does not answer either: the channel's reason stands

    async def _connect(self, node: _Node) -> None:
        spec = node.spec
        node.connection = await self.connector.connect(SshTarget.of(spec))
        options = {"replay": spec.replay, "state_dir": spec.work_dir}
        facts = (Op.FACTS, self._facts_args(node))
        if spec.relay is not None:
            # A Slurm job's node: its agent already runs in the job, reached through the login
            # node (`llmgw_core.slurm.hold`); nothing is deployed or started there.
            node.client = await AgentClient.start(
                spec.name, node.connection, spec.relay, first=facts
            )
            python = str(node.client.hello.get("python") or "")
            await self._set(node, agent_version=node.client.agent_version, python_version=python)
            await self._refresh(node)
            return
        try:
            # Most connections find the agent in place: start it straight away,
            # its facts asked for with the command.
            node.client = await AgentClient.start(
                spec.name, node.connection, serve_command(**options), first=facts
            )
        except (AgentAbsent, AgentLost):
            # Absent, or present but unable to start (a Python too old for it):
            # the deploy step checks the node's Python and says what is wrong.
            deployment = await ensure_agent(node.connection, spec.name)
            node.client = await AgentClient.start(
                spec.name, node.connection, agent_command(deployment, **options), first=facts
            )
        python = str(node.client.hello.get("python") or "")
        await self._set(node, agent_version=node.client.agent_version, python_version=python)
        await self._refresh(node)

    @staticmethod
    def _facts_args(node: _Node) -> dict[str, Any]:
        return {"model_dirs": list(node.spec.model_dirs)}

    async def _serve(self, node: _Node) -> None:
        """Re-read facts every interval until the agent's channel closes or the fleet does.

        It checks `_closing` itself: Python 3.11's `asyncio.wait_for` loses a
        cancellation that lands as its awaitable completes (a refresh answered
        just as `close()` cancels), and at 2,048 nodes that happened to dozens
        of nodes at once, so `close()` waited for them forever.
        """
        assert node.client is not None
        while not (self._closing or node.leaving):
            lost = node.client.closed
            done, _ = await asyncio.wait({lost}, timeout=self.refresh_interval_s)
            if done:
                raise lost.result()
            await self._refresh(node)

    async def _refresh(self, node: _Node) -> None:
        """Read facts now, or wait for the refresh already running (no overlap)."""
        if node.refresh_lock.locked():
            async with node.refresh_lock:
                return
        async with node.refresh_lock:
            client = node.client
            if client is None:
                return
            raw = await client.first_answer(
                Op.FACTS, self._facts_args(node), timeout_s=FACTS_TIMEOUT_S
            )
            facts = validate_facts(raw, node.spec.name)
            problem = fabric_problem(node.spec, facts)
            status: NodeStatus = "refused" if problem else "ready"
            await self._set(
                node,
                state=status,
                reason=problem,
                facts=facts,
                last_seen=datetime.now(UTC),
                last_seen_monotonic=time.monotonic(),
            )

    async def _disconnect(self, node: _Node) -> None:
        client, connection = node.client, node.connection
        node.client = None
        node.connection = None
        wait = not self._closing or self._wait_for_agents_on_close
        if client is not None:
            with contextlib.suppress(LlmgwError):
                await client.close(wait_for_exit=wait)
        if connection is not None:
            connection.close()
            with contextlib.suppress(asyncssh.Error, OSError, asyncio.TimeoutError):
                await asyncio.wait_for(connection.wait_closed(), 2.0)
