"""Running fabric tests through the nodes' agents: pairs, rails, the matrix.

The edge of `llmgw_core.fabric.verdicts`: it asks each agent what it can run
(`fabric.probe`), starts a server half on node A (`fabric.server`, a stream
whose first event says it is listening), then the client half on node B
(`fabric.client`), and hands both outputs to the pure verdicts. A node
without perftest is tested over TCP instead — and the row says TCP.

Rails of one pair run one at a time by default; with `concurrent_rails`
they run together, each on its own out-of-band port (perftest needs that).
The matrix runs waves of pairs from `plan_matrix`, no node in two at once.

Each rail (and each TCP pair) gets a secret of its own, sent to both halves
over the agents' private SSH channels: the server half's port takes only the
client that proves it holds it, so another user of a node who connects
first can neither end the test nor be measured in its place.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from llmgw_agent.ops import Op
from llmgw_core.errors import LlmgwError
from llmgw_core.fabric.nccl import AllReducePerf, parse_all_reduce_perf
from llmgw_core.fabric.perftest import read_tcp_result
from llmgw_core.fabric.verdicts import (
    AdapterEnd,
    AllReduceJudgement,
    RailPair,
    RailResult,
    judge_all_reduce,
    judge_rail,
    judge_tcp,
    node_fabric_gbps,
    pair_failed,
    pair_rails,
    plan_matrix,
)
from llmgw_core.fleet.client import AgentLost

PROBE_TIMEOUT_S = 30.0
LISTEN_TIMEOUT_S = 30.0
"""How long a server half may take to start listening."""
SLACK_S = 60.0
"""Added to a test's duration for connecting, exchanging and reporting."""
BASE_PORT = 18515
SECRET_BYTES = 32


def new_secret() -> str:
    """A new secret for one test's two halves, as hex (it goes in their args, nowhere else)."""
    return secrets.token_bytes(SECRET_BYTES).hex()


class AgentStreamLike(Protocol):
    """A streaming request: its events, then `.result` (the fleet's `AgentStream`)."""

    result: Any

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        """The stream's events, until its final result."""
        ...

    async def cancel(self) -> Any:
        """Stop the stream on the node."""
        ...


class AgentLink(Protocol):
    """What the tests need of one node's agent channel (the fleet's `AgentClient`)."""

    async def request(
        self, op: str, args: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> Any:
        """Send one request and wait for its result."""
        ...

    def stream(self, op: str, args: dict[str, Any] | None = None) -> AgentStreamLike:
        """Start a streaming request."""
        ...


LinkOf = Callable[[str], AgentLink]
"""A node's agent channel by name; raises `LlmgwError` when the node is not ready."""


@dataclass(frozen=True)
class FabricNode:
    """One node as a fabric test sees it.

    Attributes:
        name: the node's name in the inventory.
        address: where the other node reaches it (management address, else SSH host).
        hcas: its adapters on the fabric under test, in rail order ((): no fabric).
        rate_gbps: the fabric's rated speed, when the inventory gives it.
        adapters: every adapter it reported, by name.
    """

    name: str
    address: str | None
    hcas: tuple[str, ...] = ()
    rate_gbps: float | None = None
    adapters: Mapping[str, AdapterEnd] | None = None


@dataclass(frozen=True)
class RailSettings:
    """How each rail is run (the same for both halves, as perftest requires)."""

    duration_s: float = 5.0
    size_bytes: int = 8 * 1024 * 1024
    qps: int = 2
    concurrent_rails: bool = False

    def common_args(self) -> dict[str, Any]:
        """The arguments both halves get."""
        return {"duration_s": self.duration_s, "size_bytes": self.size_bytes, "qps": self.qps}


def adapter_ends(facts: Any) -> dict[str, AdapterEnd]:
    """A node's adapters from its facts (a `NodeFacts` model or the raw dict)."""
    raw = _get(facts, "adapters") or ()
    ends: dict[str, AdapterEnd] = {}
    for adapter in raw:
        name = _get(adapter, "name")
        if not name:
            continue
        ends[str(name)] = AdapterEnd(
            name=str(name),
            state=_get(adapter, "state"),
            rate_gbps=_get(adapter, "rate_gbps"),
            rated_gbps=_get(adapter, "rated_gbps"),
            link_layer=_get(adapter, "link_layer"),
            gid_index=_get(adapter, "gid_index"),
        )
    return ends


def _get(value: Any, key: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(key)
    return getattr(value, key, None)


async def run_matrix(
    nodes: Sequence[FabricNode],
    link_of: LinkOf,
    settings: RailSettings,
    *,
    max_pairs: int = 4,
) -> list[RailResult]:
    """Every pair of `nodes`, rail by rail, in waves of at most `max_pairs` pairs."""
    by_name = {node.name: node for node in nodes}
    results: list[RailResult] = []
    for wave in plan_matrix([node.name for node in nodes], max_pairs):
        rows = await asyncio.gather(
            *(run_pair(by_name[a], by_name[b], link_of, settings) for a, b in wave)
        )
        for pair_rows in rows:
            results.extend(pair_rows)
    return results


async def run_pair(
    node_a: FabricNode, node_b: FabricNode, link_of: LinkOf, settings: RailSettings
) -> list[RailResult]:
    """Node A serves, node B connects: every rail with ib_write_bw, or TCP without it."""
    try:
        link_a, link_b = link_of(node_a.name), link_of(node_b.name)
        probe_a, probe_b = await asyncio.gather(_probe(link_a), _probe(link_b))
    except LlmgwError as exc:
        return [pair_failed(node_a.name, node_b.name, "ib_write_bw", why_failed(exc))]
    missing = [
        name
        for name, probe in ((node_a.name, probe_a), (node_b.name, probe_b))
        if not probe.get("ib_write_bw")
    ]
    if not node_a.hcas or not node_b.hcas:
        why = f"{node_a.name} and {node_b.name} share no fabric"
        return [await _tcp_pair(node_a, node_b, link_a, link_b, settings, why)]
    if missing:
        why = f"perftest (ib_write_bw) is missing on {' and '.join(missing)}"
        return [await _tcp_pair(node_a, node_b, link_a, link_b, settings, why)]
    pairs, decided = pair_rails(
        node_a.name,
        node_a.hcas,
        node_a.adapters or {},
        node_b.name,
        node_b.hcas,
        node_b.adapters or {},
        node_a.rate_gbps or node_b.rate_gbps,
    )
    if settings.concurrent_rails:
        tested = await asyncio.gather(
            *(
                _rail(link_a, link_b, node_a, pair, BASE_PORT + pair.rail, settings)
                for pair in pairs
            )
        )
    else:
        tested = [await _rail(link_a, link_b, node_a, pair, BASE_PORT, settings) for pair in pairs]
    return sorted([*decided, *tested], key=lambda row: row.rail or 0)


async def _probe(link: AgentLink) -> dict[str, Any]:
    answer = await link.request(Op.FABRIC_PROBE, {}, timeout_s=PROBE_TIMEOUT_S)
    return answer if isinstance(answer, dict) else {}


def _half_args(end: AdapterEnd, settings: RailSettings) -> dict[str, Any]:
    args = {**settings.common_args(), "method": "ib_write_bw", "device": end.name}
    if end.link_layer == "Ethernet" and end.gid_index is not None:
        args["gid_index"] = end.gid_index
    if end.numa_node is not None:
        args["numa_node"] = end.numa_node
    return args


async def _listening(stream: AgentStreamLike) -> dict[str, Any] | None:
    """The server half's `listening` event, or None when it ended without one."""
    async for event in stream:
        if event.get("listening"):
            return event
    return None


async def _finish(stream: AgentStreamLike, timeout_s: float) -> dict[str, Any]:
    """The server half's result, once it ends (cancelled past `timeout_s`)."""

    async def drain() -> Any:
        async for _event in stream:
            pass
        return stream.result

    try:
        result = await asyncio.wait_for(drain(), timeout_s)
    except asyncio.TimeoutError:
        result = await stream.cancel()
    return result if isinstance(result, dict) else {}


async def _rail(
    link_a: AgentLink,
    link_b: AgentLink,
    node_a: FabricNode,
    pair: RailPair,
    port: int,
    settings: RailSettings,
) -> RailResult:
    """One rail: the server half on A, then the client half on B; judged from both outputs."""
    run_s = settings.duration_s + SLACK_S
    secret = new_secret()
    server_args = {**_half_args(pair.adapter_a, settings), "port": port, "secret": secret}
    stream = link_a.stream(Op.FABRIC_SERVER, server_args)
    try:
        listening = await asyncio.wait_for(_listening(stream), LISTEN_TIMEOUT_S)
        if listening is None:
            server = stream.result if isinstance(stream.result, dict) else {}
            return judge_rail(pair, str(server.get("output", "")), "")
        client_args = {
            **_half_args(pair.adapter_b, settings),
            "port": listening.get("port", port),
            "server_address": listening.get("address") or node_a.address,
            "secret": secret,
        }
        client = await link_b.request(Op.FABRIC_CLIENT, client_args, timeout_s=run_s)
        server = await _finish(stream, run_s)
    except (LlmgwError, asyncio.TimeoutError) as exc:
        await _cancel_quietly(stream)
        return _rail_failed(pair, why_failed(exc))
    return judge_rail(pair, str(server.get("output", "")), str(client.get("output", "")))


def why_failed(exc: BaseException) -> str:
    """One sentence for a test that could not run: unreachable, too old an agent, or refused."""
    if isinstance(exc, asyncio.TimeoutError):
        return "unreachable: the server half never started listening"
    if getattr(exc, "code", None) == "unknown_op":
        return "the agent cannot run fabric tests: update it (the console ships a newer one)"
    sentence = exc.sentence() if isinstance(exc, LlmgwError) else str(exc)
    if isinstance(exc, AgentLost) or getattr(exc, "code", None) == "timeout":
        return f"unreachable: {sentence}"
    return f"failed: {sentence}"


def _rail_failed(pair: RailPair, why: str) -> RailResult:
    return RailResult(
        node_a=pair.node_a,
        node_b=pair.node_b,
        adapter_a=pair.adapter_a.name,
        adapter_b=pair.adapter_b.name,
        rail=pair.rail,
        rated_gbps=pair.rated_gbps,
        verdict="fail",
        method="ib_write_bw",
        reason=why,
    )


async def _cancel_quietly(stream: AgentStreamLike) -> None:
    try:
        await stream.cancel()
    except LlmgwError:
        return


async def _tcp_pair(
    node_a: FabricNode,
    node_b: FabricNode,
    link_a: AgentLink,
    link_b: AgentLink,
    settings: RailSettings,
    why: str,
) -> RailResult:
    """A TCP stream from B to A over the management network, labelled as such."""
    run_s = settings.duration_s + SLACK_S
    secret = new_secret()
    server_args = {"method": "tcp", "duration_s": settings.duration_s, "secret": secret}
    stream = link_a.stream(Op.FABRIC_SERVER, server_args)
    try:
        listening = await asyncio.wait_for(_listening(stream), LISTEN_TIMEOUT_S)
        if listening is None:
            return pair_failed(node_a.name, node_b.name, "tcp", "the TCP server never listened")
        client_args = {
            "method": "tcp",
            "duration_s": settings.duration_s,
            "port": listening["port"],
            "server_address": listening.get("address") or node_a.address,
            "secret": secret,
        }
        client = await link_b.request(Op.FABRIC_CLIENT, client_args, timeout_s=run_s)
        server = await _finish(stream, run_s)
        received = read_tcp_result(server)
    except (LlmgwError, asyncio.TimeoutError) as exc:
        await _cancel_quietly(stream)
        return pair_failed(node_a.name, node_b.name, "tcp", why_failed(exc))
    except (KeyError, ValueError) as exc:
        return pair_failed(node_a.name, node_b.name, "tcp", f"failed: no TCP figure ({exc!r})")
    return judge_tcp(
        node_a.name, node_b.name, received, why, json.dumps(server), json.dumps(client)
    )


async def run_all_reduce(
    link: AgentLink,
    nodes: Sequence[FabricNode],
    *,
    gpus_per_node: int,
    env: Mapping[str, str] | None = None,
    max_bytes: int = 1024**3,
    timeout_s: float = 600.0,
    measured: Sequence[RailResult] = (),
) -> tuple[AllReducePerf, AllReduceJudgement]:
    """all_reduce_perf over every card of `nodes`, launched by `link`'s node (the first).

    Args:
        env: the `NCCL_*` variables the replica will run with (its adapters:
            `NCCL_IB_HCA`), so the test takes the path the engine will.
        measured: fabric-test rows, whose speeds replace the rated ones.

    Returns:
        The run, read, and its judgement against the slowest node's fabric.
    """
    args = {
        "hosts": [node.address or node.name for node in nodes],
        "gpus_per_node": gpus_per_node,
        "max_bytes": max_bytes,
        "env": dict(env or {}),
        "timeout_s": timeout_s,
    }
    answer = await link.request(Op.FABRIC_ALL_REDUCE, args, timeout_s=timeout_s + SLACK_S)
    output = answer.get("output", "") if isinstance(answer, dict) else ""
    run = parse_all_reduce_perf(str(output))
    speeds = [
        node_fabric_gbps(
            node.hcas, node.adapters or {}, node.rate_gbps, _measured_on(node, measured)
        )
        for node in nodes
    ]
    known = [speed for speed in speeds if speed is not None]
    return run, judge_all_reduce(run, min(known) if known else None)


def _measured_on(node: FabricNode, rows: Sequence[RailResult]) -> dict[str, float]:
    """The lowest speed each of `node`'s adapters measured in `rows` (ib_write_bw only)."""
    speeds: dict[str, float] = {}
    for row in rows:
        if row.method != "ib_write_bw" or row.measured_gbps is None:
            continue
        for name, adapter in ((row.node_a, row.adapter_a), (row.node_b, row.adapter_b)):
            if name == node.name and adapter:
                speeds[adapter] = min(speeds.get(adapter, row.measured_gbps), row.measured_gbps)
    return speeds
