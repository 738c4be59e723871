"""A disaggregated worker's KV path, read from its own start-up line (pure).

The prefill and decode workers of a disaggregated service move each
prompt's KV cache between them; like NCCL's network (`fabric.nccl`), the
path they took is read from what they print, never assumed from what they
were told. Two kinds of line are read:

* UCX's own endpoint lines, which NIXL's UCX backend prints at
  `UCX_LOG_LEVEL=info` (the launcher sets it for NIXL and LMCache workers):
  `ucp_worker.c:1877 UCX  INFO  ep_cfg[2]: tag(self/memory0 cuda_copy/cuda
  rc_mlx5/mlx5_0:1)` — `rc`/`dc`/`ud` transports on an adapter are RDMA,
  `tcp` is TCP, `cuda_ipc` alone is NVLink. The form is UCX 1.13's, as an
  MPI run over UCX prints it; it has not yet been checked against a NIXL
  worker's log;
* the simulated engine's own line, which also names the connector and the
  side (`llmgw_agent.sim.engine.transfer`: `KV transfer: NixlConnector either
  over InfiniBand on mlx5_0:1,mlx5_1:1`). Mooncake's own lines are not read
  yet.

A decode worker also logs each hand-off it received, one line a request
(the sim's `KV transfer: received 2097152 bytes in 0.49 ms (4.3 GB/s)`;
the agent's `shard.nccl` gives the last of them apart). `read_kv_handoffs`
reads them into the rate requests get now: the path a worker was given says
where the KV may go, the hand-offs say how fast it went.

`label` gives the replica page's words (`KV over mlx5_0..3 (IB), 4.1 GB/s per
request`); a worker whose KV crosses TCP gets a warning, shown red, as a NCCL
Socket fallback is.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_LINE = re.compile(
    r"KV transfer: (?P<connector>\S+) (?P<role>\S+) over (?P<kind>InfiniBand|RoCE|NVLink|RDMA|TCP)"
    r"(?: on (?P<devices>\S+))?"
)
_SHORT = {"InfiniBand": "IB", "RoCE": "RoCE", "RDMA": "RDMA", "NVLink": "NVLink", "TCP": "TCP"}
_NUMBERED = re.compile(r"^(?P<stem>.*?)(?P<number>\d+)$")


@dataclass(frozen=True)
class KvTransport:
    """What one worker said of its KV's path.

    Attributes:
        connector: the engine's name for its connector (`NixlConnector`, `mooncake`).
        role: `prefill`, `decode`, or `either` (vLLM's NIXL workers take both).
        kind: `InfiniBand`, `RoCE`, `RDMA` (Mooncake does not say which), `NVLink` or `TCP`.
        devices: the adapters (or the interface, over TCP) it named, port suffixes dropped.
    """

    connector: str
    role: str
    kind: str
    devices: tuple[str, ...] = ()

    @property
    def over_tcp(self) -> bool:
        """True when the KV crosses the management network."""
        return self.kind == "TCP"


_UCX_ENDPOINT = re.compile(r"UCX\s+INFO\s+ep_cfg\[\d+\]:(?P<lanes>.*)$")
_UCX_LANE = re.compile(r"(?P<transport>[a-z_0-9]+)/(?P<device>[A-Za-z0-9_.:-]+)")
_UCX_RDMA = ("rc", "dc", "ud")


def _ucx_endpoint(lanes: str) -> KvTransport | None:
    """One UCX endpoint's lanes as a path: RDMA on its adapters, else TCP, else NVLink."""
    rdma: list[str] = []
    tcp: list[str] = []
    cuda_ipc = False
    for lane in _UCX_LANE.finditer(lanes):
        transport, device = lane["transport"], lane["device"].partition(":")[0]
        if transport.split("_")[0] in _UCX_RDMA and device not in rdma:
            rdma.append(device)
        elif transport == "tcp" and device not in tcp:
            tcp.append(device)
        elif transport == "cuda_ipc":
            cuda_ipc = True
    if rdma:
        return KvTransport("UCX", "", "RDMA", tuple(rdma))
    if tcp:
        return KvTransport("UCX", "", "TCP", tuple(tcp))
    if cuda_ipc:
        return KvTransport("UCX", "", "NVLink")
    return None


def read_kv_transport(lines: Iterable[str]) -> KvTransport | None:
    """A worker's KV path from its log: UCX's endpoint lines where it printed them (the
    transport's own word; a TCP lane anywhere wins, as one slow peer holds every transfer),
    else its last transfer line; None when it printed neither."""
    said: KvTransport | None = None
    endpoints: list[KvTransport] = []
    for line in lines:
        match = _LINE.search(line)
        if match:
            devices = tuple(d.partition(":")[0] for d in (match["devices"] or "").split(",") if d)
            said = KvTransport(match["connector"], match["role"], match["kind"], devices)
            continue
        endpoint = _UCX_ENDPOINT.search(line)
        found = _ucx_endpoint(endpoint["lanes"]) if endpoint else None
        if found is not None:
            endpoints.append(found)
    if not endpoints:
        return said
    chosen = next((e for e in endpoints if e.over_tcp), None) or next(
        (e for e in endpoints if e.kind == "RDMA"), endpoints[-1]
    )
    devices = tuple(dict.fromkeys(d for e in endpoints if e.kind == chosen.kind for d in e.devices))
    kind = chosen.kind
    if said is not None and kind == "RDMA" and said.kind in ("InfiniBand", "RoCE"):
        kind = said.kind  # UCX names the adapter, not its link layer
    return KvTransport(said.connector if said else "UCX", said.role if said else "", kind, devices)


_HANDOFF = re.compile(
    r"KV transfer: received (?P<bytes>\d{1,19}) bytes in (?P<ms>\d{1,12}(?:\.\d{1,9})?) ms"
    r" \((?P<rate>\d{1,12}(?:\.\d{1,9})?) GB/s\)",
    re.ASCII,  # `float` would take other scripts' digits too
)


@dataclass(frozen=True)
class KvHandoffs:
    """The last KV hand-offs one decode worker received, one a request.

    Attributes:
        count: how many hand-off lines were read.
        bytes_moved: their bytes together.
        gbytes_per_s: the median request's rate, in GB/s (one slow outlier does not move it).
        last_gbytes_per_s: the newest request's rate, in GB/s.
    """

    count: int
    bytes_moved: int
    gbytes_per_s: float
    last_gbytes_per_s: float


def read_kv_handoffs(lines: Iterable[str]) -> KvHandoffs | None:
    """A decode worker's recent hand-offs from its hand-off lines, oldest first; None when it
    logged none (a prefill worker, a worker not asked yet). A line that does not read as a
    hand-off, or whose rate is not a finite number, is skipped."""
    rates: list[float] = []
    moved = 0
    for line in lines:
        match = _HANDOFF.search(line) if isinstance(line, str) else None
        if match is None:
            continue
        rate = float(match["rate"])
        if not math.isfinite(rate):
            continue
        rates.append(rate)
        moved += int(match["bytes"])
    if not rates:
        return None
    return KvHandoffs(len(rates), moved, statistics.median(rates), rates[-1])


def rate_words(handoffs: KvHandoffs) -> str:
    """`4.1 GB/s per request` (`0.35 GB/s` below one, so a crawl never reads as zero)."""
    rate = handoffs.gbytes_per_s
    return f"{rate:.1f} GB/s per request" if rate >= 1 else f"{rate:.2g} GB/s per request"


def device_span(devices: Sequence[str]) -> str:
    """`mlx5_0..3` for a run of one stem's numbers, else the names joined: `mlx5_0, mlx5_4`."""
    parts = [_NUMBERED.match(d) for d in devices]
    if len(devices) > 2 and all(parts):
        stems = {p["stem"] for p in parts if p}
        numbers = [int(p["number"]) for p in parts if p]
        if len(stems) == 1 and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return f"{stems.pop()}{numbers[0]}..{numbers[-1]}"
    return ", ".join(devices)


def label(transport: KvTransport, handoffs: KvHandoffs | None = None) -> str:
    """`KV over mlx5_0..3 (IB)`, `KV over NVLink`, `KV over TCP (eno1)`; with a decode
    worker's hand-offs, their rate after it: `KV over mlx5_0..3 (IB), 4.1 GB/s per request`."""
    short = _SHORT[transport.kind]
    if transport.kind == "NVLink" or not transport.devices:
        path = f"KV over {short}"
    elif transport.over_tcp:
        path = f"KV over TCP ({device_span(transport.devices)})"
    else:
        path = f"KV over {device_span(transport.devices)} ({short})"
    return f"{path}, {rate_words(handoffs)}" if handoffs is not None else path


def kv_warning(
    replica: str, node: str, transport: KvTransport, handoffs: KvHandoffs | None = None
) -> str | None:
    """The red line for a worker whose KV crosses TCP (with the rate its requests got, when it
    received some); None otherwise."""
    if not transport.over_tcp:
        return None
    got = (
        f" ({rate_words(handoffs)} over its last {handoffs.count})" if handoffs is not None else ""
    )
    return (
        f"{replica} on {node}: the KV cache crosses TCP ({device_span(transport.devices)}),"
        f" not the fabric's rails: every prompt waits for it{got} (check UCX_NET_DEVICES, the"
        f" rails' fabric test, or allow_tcp)"
    )
