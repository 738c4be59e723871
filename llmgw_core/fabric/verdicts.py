"""Fabric tests and NCCL's transport: what to run, and what the results mean.

Pure: it takes the fabric as the operator named it, the adapters the nodes
reported, and the raw output the agents returned, and gives back plans and
verdicts. The parsers live in `fabric_perftest` (ib_write_bw, our TCP test)
and `fabric_nccl` (NCCL INFO lines, all_reduce_perf); the I/O that runs the
tests is in `fabric_run`.

The rules, each in one function:

* rails pair by position in the fabric's adapter list (`pair_rails`): rail 0
  of node A talks to rail 0 of node B, never across rails, since that is how
  NCCL uses them;
* a rail is judged against its rated speed (`verdict_for_ratio`): pass at
  ≥ 90 %, warn from 75 %, fail below — or when an adapter is down or the
  peer unreachable;
* every pair of N nodes is tested, each node in one test at a time, at most
  `max_pairs` tests at once (`plan_matrix`);
* all_reduce is judged against the slowest node's fabric (`judge_all_reduce`);
* a multi-node replica whose shards use Socket, or an adapter outside its
  fabric, is warned about (`transport_warnings`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from llmgw_core.fabric.nccl import AllReducePerf, NcclTransport, parse_nccl_transport
from llmgw_core.fabric.paths import NvlinkMatrix, inside_path, shm_warning
from llmgw_core.fabric.perftest import IbWriteBw, TcpThroughput, parse_ib_write_bw

PASS_RATIO = 0.90
"""A rail passes at 90 % of its rated speed (NVIDIA's ngc_multinode_perf criterion)."""
WARN_RATIO = 0.75
"""Between 75 % and 90 % a rail works but something (NUMA pinning, PCIe, a cable) costs speed."""

Verdict = Literal["pass", "warn", "fail", "untested"]
Method = Literal["ib_write_bw", "tcp"]


def verdict_for_ratio(ratio: float) -> Verdict:
    """Pass at ≥ 90 % of the rated speed, warn from 75 %, fail below."""
    if ratio >= PASS_RATIO:
        return "pass"
    if ratio >= WARN_RATIO:
        return "warn"
    return "fail"


class AdapterEnd(BaseModel):
    """One node's adapter as the tests need it (from the node's facts).

    Attributes:
        name: `mlx5_0`.
        state: `ACTIVE`, `DOWN`, ... (None when the node did not say).
        rate_gbps: the port's current rate.
        rated_gbps: the rate it should run at (the best of its identical siblings).
        link_layer: `InfiniBand` or `Ethernet` (RoCE).
        gid_index: the RoCE v2 GID index, when known.
        numa_node: the adapter's NUMA node, when known (for pinning).
    """

    model_config = ConfigDict(frozen=True)

    name: str
    state: str | None = None
    rate_gbps: float | None = None
    rated_gbps: float | None = None
    link_layer: str | None = None
    gid_index: int | None = None
    numa_node: int | None = None

    @property
    def is_up(self) -> bool:
        """True unless the node reported the port in a state other than ACTIVE."""
        return self.state is None or self.state.upper() == "ACTIVE"


class RailPair(BaseModel):
    """One test to run: rail `rail` of node A against the same rail of node B."""

    model_config = ConfigDict(frozen=True)

    rail: int
    node_a: str
    node_b: str
    adapter_a: AdapterEnd
    adapter_b: AdapterEnd
    rated_gbps: float | None


class RailResult(BaseModel):
    """One row of a fabric test: a pair of nodes on one rail (or over TCP).

    Attributes:
        rail: the position in the fabric's adapter list (None for TCP).
        measured_gbps: what the test moved (None when nothing ran).
        ratio: measured ÷ rated (None when either is unknown).
        verdict: pass / warn / fail, or `untested` when only TCP could run.
        method: `ib_write_bw` (the fabric) or `tcp` (the management network).
        reason: one sentence for people.
        raw_server, raw_client: what each side printed, kept whole.
    """

    model_config = ConfigDict(frozen=True)

    node_a: str
    node_b: str
    adapter_a: str | None = None
    adapter_b: str | None = None
    rail: int | None = None
    rated_gbps: float | None = None
    measured_gbps: float | None = None
    ratio: float | None = None
    verdict: Verdict
    method: Method
    reason: str
    raw_server: str = ""
    raw_client: str = ""

    def row(self) -> dict[str, object]:
        """The columns of the headless step (`--json` and the table)."""
        return {
            "node_a": self.node_a,
            "node_b": self.node_b,
            "adapter_a": self.adapter_a,
            "adapter_b": self.adapter_b,
            "rail": self.rail,
            "rated_gbps": self.rated_gbps,
            "measured_gbps": None if self.measured_gbps is None else round(self.measured_gbps, 1),
            "ratio": None if self.ratio is None else round(self.ratio, 3),
            "verdict": self.verdict,
            "method": self.method,
            "reason": self.reason,
        }


def pair_rails(
    node_a: str,
    hcas_a: Sequence[str],
    adapters_a: Mapping[str, AdapterEnd],
    node_b: str,
    hcas_b: Sequence[str],
    adapters_b: Mapping[str, AdapterEnd],
    rate_gbps: float | None = None,
) -> tuple[list[RailPair], list[RailResult]]:
    """Pair two nodes' adapters rail by rail: position i of each node's list for the fabric.

    Args:
        hcas_a, hcas_b: each node's adapters on the fabric, in rail order, as
            the operator named them in the inventory.
        adapters_a, adapters_b: each node's adapters by name (from its facts).
        rate_gbps: the fabric's rated speed; else the adapters' rated speed.

    Returns:
        The pairs to test, and the rows already decided without a test (an
        adapter missing, down, or without a partner fails its rail: nothing
        will run on it).
    """
    pairs: list[RailPair] = []
    decided: list[RailResult] = []
    for rail in range(max(len(hcas_a), len(hcas_b))):
        hca_a = hcas_a[rail] if rail < len(hcas_a) else None
        hca_b = hcas_b[rail] if rail < len(hcas_b) else None
        end_a = adapters_a.get(hca_a) if hca_a else None
        end_b = adapters_b.get(hca_b) if hca_b else None
        rated = rate_gbps or _rated(end_a, end_b)
        reasons = [
            f"{node} has no rail {rail}" if hca is None else f"{node} has no adapter {hca}"
            for node, hca, end in ((node_a, hca_a, end_a), (node_b, hca_b, end_b))
            if end is None
        ] + [
            f"{end.name} on {node} is {end.state}"
            for node, end in ((node_a, end_a), (node_b, end_b))
            if end is not None and not end.is_up
        ]
        if reasons or end_a is None or end_b is None:
            decided.append(
                RailResult(
                    node_a=node_a,
                    node_b=node_b,
                    adapter_a=hca_a,
                    adapter_b=hca_b,
                    rail=rail,
                    rated_gbps=rated,
                    verdict="fail",
                    method="ib_write_bw",
                    reason="down: " + "; ".join(reasons),
                )
            )
            continue
        pairs.append(
            RailPair(
                rail=rail,
                node_a=node_a,
                node_b=node_b,
                adapter_a=end_a,
                adapter_b=end_b,
                rated_gbps=rated,
            )
        )
    return pairs, decided


def _rated(end_a: AdapterEnd | None, end_b: AdapterEnd | None) -> float | None:
    """The lower of the two adapters' rated speeds (a rail runs at its slower end)."""
    rates = [
        end.rated_gbps or end.rate_gbps
        for end in (end_a, end_b)
        if end is not None and (end.rated_gbps or end.rate_gbps)
    ]
    return min(rates) if rates else None


def judge_rail(pair: RailPair, server_output: str, client_output: str) -> RailResult:
    """Judge one rail from what `ib_write_bw` printed on both sides.

    The client's (sender's) average at the largest message size is the figure.
    The server's counts only where it ran with this client: perftest's port
    takes whoever connects first, and on a shared node that may be another
    user's client, so it is used when the queue pairs both sides printed
    match (or when there is no client output at all). Queue pairs that do not
    match fail the rail; a side that could not reach the other, or found its
    port down, fails it with that reason.
    """
    server = parse_ib_write_bw(server_output)
    client = parse_ib_write_bw(client_output)
    paired = same_peer(server, client)
    if client.average_gbps is not None:
        measured: float | None = client.average_gbps
    elif paired is True or not client_output.strip():
        measured = server.average_gbps
    else:
        measured = None
    common = {
        "node_a": pair.node_a,
        "node_b": pair.node_b,
        "adapter_a": pair.adapter_a.name,
        "adapter_b": pair.adapter_b.name,
        "rail": pair.rail,
        "rated_gbps": pair.rated_gbps,
        "method": "ib_write_bw",
        "raw_server": server_output,
        "raw_client": client_output,
    }
    if paired is False:
        return RailResult(
            **common,
            verdict="fail",
            reason=(
                f"not measured: the server half on {pair.node_a} ran with a peer that is not "
                f"{pair.node_b}'s client (another user may have reached its port first)"
            ),
        )
    if measured is None:
        return RailResult(
            **common,
            verdict="fail",
            reason=_no_result_reason(pair, server, client),
        )
    if not pair.rated_gbps:
        return RailResult(
            **common,
            measured_gbps=measured,
            verdict="warn",
            reason=f"{measured:.1f} Gb/s; the rail's rated speed is unknown (set rate_gbps on the fabric)",
        )
    ratio = measured / pair.rated_gbps
    return RailResult(
        **common,
        measured_gbps=measured,
        ratio=ratio,
        verdict=verdict_for_ratio(ratio),
        reason=f"{measured:.1f} of {pair.rated_gbps:g} Gb/s ({ratio:.0%})",
    )


def same_peer(server: IbWriteBw, client: IbWriteBw) -> bool | None:
    """Whether the two sides ran with each other, by the queue pairs each printed.

    None when a side printed none (a failed run, or an output without them).
    """
    checks = [
        (theirs, mine)
        for theirs, mine in (
            (server.remote_qpns, client.local_qpns),
            (client.remote_qpns, server.local_qpns),
        )
        if theirs and mine
    ]
    if not checks:
        return None
    return all(theirs == mine for theirs, mine in checks)


def _no_result_reason(pair: RailPair, server: IbWriteBw, client: IbWriteBw) -> str:
    for run, node, adapter in (
        (client, pair.node_b, pair.adapter_b.name),
        (server, pair.node_a, pair.adapter_a.name),
    ):
        if run.failure == "unreachable":
            return f"unreachable: {pair.node_b} could not reach {pair.node_a} on {adapter} ({_first(run)})"
        if run.failure in ("down", "no-device"):
            return f"down: {adapter} on {node}: {_first(run)}"
    return f"no result: {_first(client) or _first(server) or 'ib_write_bw printed no table'}"


def _first(run: IbWriteBw) -> str:
    return run.error_lines[0] if run.error_lines else ""


def judge_tcp(
    node_a: str,
    node_b: str,
    receiver: TcpThroughput,
    why: str,
    raw_server: str = "",
    raw_client: str = "",
) -> RailResult:
    """A TCP measurement between two nodes: labelled TCP, never taken for the fabric."""
    return RailResult(
        node_a=node_a,
        node_b=node_b,
        measured_gbps=receiver.gbps,
        verdict="untested",
        method="tcp",
        reason=f"TCP over the management network, not the fabric: {why}",
        raw_server=raw_server,
        raw_client=raw_client,
    )


def pair_failed(node_a: str, node_b: str, method: Method, reason: str) -> RailResult:
    """A pair whose test could not run at all (an agent gone, a half refused), with why."""
    return RailResult(
        node_a=node_a,
        node_b=node_b,
        verdict="fail",
        method=method,
        reason=reason,
    )


def plan_matrix(nodes: Sequence[str], max_pairs: int = 4) -> list[list[tuple[str, str]]]:
    """Every pair of `nodes`, in rounds where no node is in two tests at once.

    A node in two tests would share its rails between them and halve both
    figures. The circle method gives N−1 rounds for N even (N for N odd);
    each round is cut into waves of at most `max_pairs` tests.

    Returns:
        The waves, in order; the tests of one wave run at the same time. In
        each pair the node listed first in `nodes` comes first (it serves).
    """
    if max_pairs < 1:
        raise ValueError("max_pairs must be at least 1")
    players: list[str | None] = list(dict.fromkeys(nodes))
    position = {node: index for index, node in enumerate(players)}
    if len(players) < 2:
        return []
    if len(players) % 2:
        players.append(None)
    count = len(players)
    waves: list[list[tuple[str, str]]] = []
    for _ in range(count - 1):
        pairs = []
        for index in range(count // 2):
            first, second = players[index], players[count - 1 - index]
            if first is not None and second is not None:
                in_order = position[first] < position[second]
                pairs.append((first, second) if in_order else (second, first))
        for start in range(0, len(pairs), max_pairs):
            waves.append(pairs[start : start + max_pairs])
        players = [players[0], players[-1], *players[1:-1]]
    return waves


def node_fabric_gbps(
    hcas: Sequence[str],
    adapters: Mapping[str, AdapterEnd],
    rate_gbps: float | None = None,
    measured_gbps: Mapping[str, float] | None = None,
) -> float | None:
    """What one node can put on a fabric: the sum of its rails, in Gb/s.

    A rail counts at its measured speed where a fabric test measured it, else
    at its rated speed (the fabric's, else the adapter's); a down rail counts
    nothing. None when no rail has a known speed.
    """
    total = 0.0
    known = False
    for hca in hcas:
        end = adapters.get(hca)
        if end is not None and not end.is_up:
            known = True
            continue
        speed = (measured_gbps or {}).get(hca)
        if speed is None:
            speed = rate_gbps or (end.rated_gbps or end.rate_gbps if end else None)
        if speed:
            total += speed
            known = True
    return total if known else None


class AllReduceJudgement(BaseModel):
    """An all_reduce run set against the slowest node's fabric.

    Attributes:
        node_count: the nodes of the run (NCCL's `nNodes`, else the distinct hosts).
        algbw_gbs: algbw (GB/s) at the largest message, out-of-place.
        busbw_gbs: busbw (GB/s) at the same size, as nccl-tests prints it.
        internode_gbs: what each node sent over the network per second: for a
            hierarchical all_reduce that is algbw × 2(nodes−1)/nodes.
        expected_gbs: the slowest node's fabric in GB/s (Gb/s ÷ 8).
        ratio, verdict: internode ÷ expected, judged like a rail; `untested`
            for a single-node run (it never touched the fabric).
    """

    model_config = ConfigDict(frozen=True)

    node_count: int
    algbw_gbs: float | None = None
    busbw_gbs: float | None = None
    internode_gbs: float | None = None
    expected_gbs: float | None = None
    ratio: float | None = None
    verdict: Verdict
    reason: str


def judge_all_reduce(run: AllReducePerf, slowest_node_gbps: float | None) -> AllReduceJudgement:
    """Judge all_reduce_perf against the slowest link: the slowest node's fabric.

    Args:
        run: the parsed run.
        slowest_node_gbps: the lowest, over the run's nodes, of the sum of
            each node's rail speeds (Gb/s); measured rails if tested, else rated.
    """
    # NCCL's own node count wins: containers can share one host name.
    nodes = run.transport.nodes or len(run.hosts) or 1
    largest = run.largest
    if largest is None:
        return AllReduceJudgement(
            node_count=nodes,
            verdict="fail",
            reason="all_reduce_perf printed no result table",
        )
    algbw = largest.out_of_place_algbw_gbs
    busbw = largest.out_of_place_busbw_gbs
    if nodes < 2:
        return AllReduceJudgement(
            node_count=nodes,
            algbw_gbs=algbw,
            busbw_gbs=busbw,
            verdict="untested",
            reason=f"one node: busbw {busbw:g} GB/s never crossed the fabric",
        )
    internode = algbw * 2 * (nodes - 1) / nodes
    if not slowest_node_gbps:
        return AllReduceJudgement(
            node_count=nodes,
            algbw_gbs=algbw,
            busbw_gbs=busbw,
            internode_gbs=internode,
            verdict="warn",
            reason=f"{internode:.1f} GB/s per node; the fabric's rated speed is unknown",
        )
    expected = slowest_node_gbps / 8
    ratio = internode / expected
    return AllReduceJudgement(
        node_count=nodes,
        algbw_gbs=algbw,
        busbw_gbs=busbw,
        internode_gbs=internode,
        expected_gbs=expected,
        ratio=ratio,
        verdict=verdict_for_ratio(ratio),
        reason=f"{internode:.1f} of {expected:g} GB/s per node across {nodes} nodes ({ratio:.0%})",
    )


def transport_warnings(
    replica: str,
    shards: Mapping[str, NcclTransport],
    fabric_hcas: Sequence[str] | None,
    node_count: int | None = None,
    nvlink: Mapping[str, NvlinkMatrix] | None = None,
) -> list[str]:
    """The warnings a replica's NCCL transport deserves, one sentence each.

    Args:
        replica: the replica's name, for the sentences.
        shards: each shard's transport, by shard (or node) name.
        fabric_hcas: the adapters of the replica's fabric (None: no fabric).
        node_count: the replica's node count (else the largest `nNodes` seen).
        nvlink: each shard's node topology (the agent's `nvlink` facts), by the
            same names; NVLink cards joined through host memory are warned about.
    """
    nodes = node_count or max((t.nodes or 1 for t in shards.values()), default=1)
    warnings: list[str] = []
    for name, transport in sorted(shards.items()):
        topology = (nvlink or {}).get(name)
        inside = inside_path(transport, topology)
        said = shm_warning(replica, name, inside) if inside is not None else None
        if said:
            warnings.append(said)
    if nodes > 1:
        on_socket = sorted(name for name, t in shards.items() if t.network_kind == "socket")
        if on_socket:
            warnings.append(
                f"{replica}: NCCL fell back to TCP sockets on {', '.join(on_socket)} — it runs, "
                "slowly; give the replica its fabric's adapters (NCCL_IB_HCA) and check "
                "that NCCL_IB_DISABLE is not set (see docs/fabric.md)"
            )
    if fabric_hcas is not None:
        allowed = set(fabric_hcas)
        for name, transport in sorted(shards.items()):
            outside = [a.name for a in transport.adapters if a.name not in allowed]
            if outside:
                warnings.append(
                    f"{replica}: shard {name} uses {', '.join(outside)}, outside its fabric "
                    f"({', '.join(fabric_hcas)}); pin NCCL_IB_HCA with '=' to the fabric's adapters"
                )
    return warnings


def replica_transport(
    replica: str,
    shard_logs: Mapping[str, Iterable[str]],
    fabric_hcas: Sequence[str] | None,
    node_count: int | None = None,
    nvlink: Mapping[str, NvlinkMatrix] | None = None,
) -> tuple[dict[str, NcclTransport], list[str]]:
    """Each shard's NCCL transport from its log lines, and the replica's warnings.

    Args:
        replica: the replica's name.
        shard_logs: each shard's log lines (any prefix), by shard or node name.
        fabric_hcas: the adapters of the replica's fabric (None: it has none).
        node_count: how many nodes the replica spans.
        nvlink: each node's topology, by the same names (`transport_warnings`).
    """
    transports = {name: parse_nccl_transport(lines) for name, lines in shard_logs.items()}
    return transports, transport_warnings(replica, transports, fabric_hcas, node_count, nvlink)
