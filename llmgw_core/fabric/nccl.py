"""What NCCL says about itself: the transport from `NCCL_DEBUG=INFO` lines, and
`all_reduce_perf` (nccl-tests) results.

A multi-node model that silently falls back to TCP runs — slowly — and nobody
notices until the bill. NCCL says which network it took in its INFO lines;
this module reads them into facts a shard can carry:

* `NCCL version 2.21.5+cuda12.4` (no prefix);
* `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:…` — the
  adapters and their link layer (`/IB`, `/RoCE`, `/IB/SHARP`);
* `NET/IB : No device found.` then `NET/Socket : Using [0]eth0:…`;
* `Using network IB` | `Socket` | a plugin's name (`IBext_v8`);
* `… via NET/IB/0/GDRDMA` (GPUDirect RDMA) or `via NET/IB/1` (through host
  memory) or `via NET/Socket/0`;
* `comm … nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0|1`;
* the path of each rank pair inside a node (`src/transport/p2p.cc`,
  `shm.cc`): `Channel 00/0 : 1[1] -> 2[2] via P2P/CUMEM` (and `/read`,
  `P2P/IPC`, `P2P/direct pointer`, `P2P/indirect/…`), `via SHM/direct/direct`
  (after 2.30: `SHM/direct`), `via P2P/MNNVL` (NVLink across trays).

Lines may carry prefixes in front of NCCL's own `host:pid:tid [dev]`: Ray's
`(RayWorkerWrapper pid=…, ip=…) `, mpirun's `[1,0]<stdout>:`, a timestamp.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

NetworkKind = Literal["ib", "socket", "plugin"]

_NCCL_LINE = re.compile(
    r"(?P<host>[^\s:()\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL (?P<level>INFO|WARN|TRACE) (?P<msg>.*)$"
)
_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+)(?:\+cuda(?P<cuda>[\d.]+))?")
_USING_NETWORK = re.compile(r"^Using network (?P<name>.+?)\s*$")
_NET_IB_USING = re.compile(r"^NET/IB ?: Using (?P<list>.*?)(?:;\s*OOB (?P<oob>\S+))?\s*$")
_IB_ENTRY = re.compile(
    r"\[(?P<index>\d+)\](?P<name>[^:\s]+):(?P<port>\d+)/(?P<layer>[A-Za-z]+)(?P<rest>/\S+)?"
)
_NET_SOCKET_USING = re.compile(r"^NET/Socket ?: Using (?P<list>.*)$")
_SOCKET_ENTRY = re.compile(r"\[(?P<index>\d+)\](?P<name>[^:\s]+):(?P<address>[^<\s]+)")
_CHANNEL_NET = re.compile(r"via NET/(?P<net>[A-Za-z0-9_]+)/(?P<dev>\d+)(?:\(\d+\))?(?P<rest>\S*)")
_CHANNEL = re.compile(
    r"Channel \d+(?:/\d+)? : (?P<src>\d+)\[(?P<src_dev>[0-9a-fx]+)\] -> "
    r"(?P<dst>\d+)\[(?P<dst_dev>[0-9a-fx]+)\] (?:\[(?:send|receive)\] )?"
    r"via (?P<via>P2P/direct pointer\S*|\S+)"
)
_COMM = re.compile(r"nRanks (?P<ranks>\d+) nNodes (?P<nodes>\d+) .*?MNNVL (?P<mnnvl>\d)")
_GDR_ENABLED = re.compile(r"GPU Direct RDMA Enabled for HCA")


class NcclAdapter(BaseModel):
    """One adapter NCCL said it uses (`[0]mlx5_0:1/IB/SHARP`)."""

    model_config = ConfigDict(frozen=True)

    name: str
    port: int
    link_layer: Literal["IB", "RoCE"] | str
    sharp: bool = False


PathKind = Literal["p2p", "shm", "mnnvl", "net"]
"""How NCCL joined two ranks: peer to peer between the cards (NVLink or PCIe —
the line does not say which; the node's topology does), through host memory,
over NVLink across trays, or over the network."""


class NcclPath(BaseModel):
    """One rank pair NCCL connected, and how (`0[0] -> 1[1] via P2P/CUMEM`).

    Attributes:
        src, dst: the ranks.
        src_card, dst_card: their cards' NVML indices (the numbers in brackets),
            None where an older NCCL printed a PCI bus id there (`[3e000]`).
        via: NCCL's own words after `via` (`P2P/CUMEM/read`, `SHM/direct/direct`).
        kind: what `via` means (`PathKind`).
    """

    model_config = ConfigDict(frozen=True)

    src: int
    dst: int
    src_card: int | None
    dst_card: int | None
    via: str
    kind: PathKind


def path_kind(via: str) -> PathKind:
    """`P2P/MNNVL…` → mnnvl, other `P2P/…` → p2p, `SHM/…` → shm, `NET/…` (and CollNet) → net."""
    if via.startswith("P2P/MNNVL"):
        return "mnnvl"
    if via.startswith("P2P/"):
        return "p2p"
    if via.startswith("SHM/"):
        return "shm"
    return "net"


def _card(text: str) -> int | None:
    """An NVML index (`3`); None for an old NCCL's bus id (`3e000`, `0x81`)."""
    return int(text) if text.isdigit() and len(text) <= 3 else None


class NcclTransport(BaseModel):
    """What NCCL chose, read from one shard's log (or one nccl-tests run).

    Attributes:
        version: `2.21.5`, or None when the version line is absent.
        cuda_version: the CUDA NCCL was built for (`12.4`).
        network: the name after `Using network` (`IB`, `Socket`, `IBext_v8`).
        network_kind: `ib` (built-in IB or an IB plugin such as `IBext_v8`),
            `socket` (TCP), `plugin` (any other net plugin), None when unsaid.
        adapters: the RDMA adapters listed by `NET/IB : Using`.
        socket_interfaces: the interfaces listed by `NET/Socket : Using`.
        ib_found: False after `NET/IB : No device found.`.
        gpudirect: True when a network channel runs `/GDRDMA`, False when
            network channels run without it, None when no network channel
            was logged (a single-node communicator).
        mnnvl: the `MNNVL` flag of the communicator (multi-node NVLink).
        nodes: the largest `nNodes` seen.
        ranks: the largest `nRanks` seen.
        hosts: the host names in the line prefixes.
        warnings: NCCL's own WARN messages.
        paths: each rank pair NCCL connected, once per pair and way (first seen).
    """

    model_config = ConfigDict(frozen=True)

    version: str | None = None
    cuda_version: str | None = None
    network: str | None = None
    network_kind: NetworkKind | None = None
    adapters: tuple[NcclAdapter, ...] = ()
    socket_interfaces: tuple[str, ...] = ()
    ib_found: bool | None = None
    gpudirect: bool | None = None
    mnnvl: bool | None = None
    nodes: int | None = None
    ranks: int | None = None
    hosts: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    paths: tuple[NcclPath, ...] = ()

    @property
    def label(self) -> str:
        """A short name for people: `IB + GDR`, `IB (IBext_v8) + GDR`, `Socket`, `MNNVL`."""
        if self.network is None:
            return "MNNVL" if self.mnnvl else "unknown"
        if self.network_kind == "socket":
            name = "Socket (TCP)"
        elif self.network_kind == "ib" and self.network != "IB":
            name = f"IB ({self.network})"
        else:
            name = self.network
        if self.mnnvl:
            name = f"MNNVL + {name}"
        if self.gpudirect is True:
            return f"{name} + GDR"
        if self.gpudirect is False and self.network_kind != "socket":
            return f"{name} without GDR"
        return name


def network_kind(name: str) -> NetworkKind:
    """`IB` and IB plugins (`IBext_v8`, `IBext`) are the fabric; `Socket` is TCP."""
    if name == "Socket":
        return "socket"
    if name.startswith("IB"):
        return "ib"
    return "plugin"


def nccl_message(line: str) -> tuple[str, str, str] | None:
    """`(host, level, message)` of one NCCL line, whatever prefix stands before it."""
    match = _NCCL_LINE.search(line.rstrip("\r\n"))
    if match is None:
        return None
    return match.group("host"), match.group("level"), match.group("msg").strip()


def parse_nccl_transport(lines: Iterable[str]) -> NcclTransport:
    """Read NCCL's INFO lines (any prefix) into the transport it chose.

    Args:
        lines: log lines of one shard, or one run; other lines are ignored.
    """
    version = cuda = network = None
    adapters: dict[str, NcclAdapter] = {}
    sockets: list[str] = []
    ib_found: bool | None = None
    net_channels = gdr_channels = 0
    gdr_enabled = False
    mnnvl: bool | None = None
    nodes = ranks = None
    hosts: list[str] = []
    warnings: list[str] = []
    paths: dict[tuple[int, int, str], NcclPath] = {}
    for raw in lines:
        version_match = _VERSION.search(raw)
        if version_match and version is None:
            version, cuda = version_match.group("version"), version_match.group("cuda")
        parsed = nccl_message(raw)
        if parsed is None:
            continue
        host, level, message = parsed
        if host not in hosts:
            hosts.append(host)
        if level == "WARN":
            warnings.append(message)
            continue
        if (using := _USING_NETWORK.match(message)) is not None:
            network = using.group("name")
        elif (ib := _NET_IB_USING.match(message)) is not None:
            ib_found = True
            for entry in _IB_ENTRY.finditer(ib.group("list")):
                layer = entry.group("layer")
                adapters.setdefault(
                    entry.group("name"),
                    NcclAdapter(
                        name=entry.group("name"),
                        port=int(entry.group("port")),
                        link_layer=layer,
                        sharp="SHARP" in (entry.group("rest") or ""),
                    ),
                )
        elif message.startswith("NET/IB") and "No device found" in message:
            ib_found = False if ib_found is None else ib_found
        elif (sock := _NET_SOCKET_USING.match(message)) is not None:
            for entry in _SOCKET_ENTRY.finditer(sock.group("list")):
                if entry.group("name") not in sockets:
                    sockets.append(entry.group("name"))
        elif _GDR_ENABLED.search(message):
            gdr_enabled = True
        elif (comm := _COMM.search(message)) is not None:
            nodes = max(nodes or 0, int(comm.group("nodes")))
            ranks = max(ranks or 0, int(comm.group("ranks")))
            mnnvl = bool(mnnvl) or comm.group("mnnvl") == "1"
        for channel in _CHANNEL_NET.finditer(message):
            net_channels += 1
            if "GDRDMA" in channel.group("rest"):
                gdr_channels += 1
        if "via P2P/MNNVL" in message:
            mnnvl = True
        if (channel := _CHANNEL.search(message)) is not None:
            via = channel.group("via")
            key = (int(channel.group("src")), int(channel.group("dst")), via)
            if key not in paths:
                paths[key] = NcclPath(
                    src=key[0],
                    dst=key[1],
                    src_card=_card(channel.group("src_dev")),
                    dst_card=_card(channel.group("dst_dev")),
                    via=via,
                    kind=path_kind(via),
                )
    gpudirect: bool | None = None
    if net_channels:
        gpudirect = gdr_channels > 0
    elif gdr_enabled:
        gpudirect = True
    return NcclTransport(
        version=version,
        cuda_version=cuda,
        network=network,
        network_kind=network_kind(network) if network else None,
        adapters=tuple(adapters.values()),
        socket_interfaces=tuple(sockets),
        ib_found=ib_found,
        gpudirect=gpudirect,
        mnnvl=mnnvl,
        nodes=nodes,
        ranks=ranks,
        hosts=tuple(hosts),
        warnings=tuple(warnings),
        paths=tuple(paths.values()),
    )


# --- all_reduce_perf ---------------------------------------------------------

_RANK_LINE = re.compile(
    r"#\s+Rank\s+(?P<rank>\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device"
)
_AVG_BUSBW = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<value>\d+(?:\.\d+)?)")
_NUMBER = r"(\d+(?:\.\d+)?)"
_DATA_ROW = re.compile(
    r"^\s*(?:\[\d+,\d+\]<stdout>:\s*)?(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>[a-z0-9_]+)\s+"
    r"(?:(?P<redop>[a-z]+)\s+)?(?P<root>-?\d+)\s+"
    rf"{_NUMBER}\s+{_NUMBER}\s+{_NUMBER}\s+(?P<wrong_out>\S+)\s+"
    rf"{_NUMBER}\s+{_NUMBER}\s+{_NUMBER}\s+(?P<wrong_in>\S+)\s*$"
)


class AllReduceRow(BaseModel):
    """One message size: out-of-place and in-place time, algbw and busbw (GB/s)."""

    model_config = ConfigDict(frozen=True)

    size_bytes: int
    out_of_place_us: float
    out_of_place_algbw_gbs: float
    out_of_place_busbw_gbs: float
    in_place_us: float
    in_place_algbw_gbs: float
    in_place_busbw_gbs: float


class AllReducePerf(BaseModel):
    """One `all_reduce_perf` run, read.

    Attributes:
        hosts: the distinct hosts of the ranks, in rank order.
        rank_count: the number of ranks.
        rows: one per message size.
        avg_busbw_gbs: the footer's `Avg bus bandwidth` (GB/s), when printed.
        transport: what the NCCL INFO lines in the same output say, if any.
    """

    model_config = ConfigDict(frozen=True)

    hosts: tuple[str, ...]
    rank_count: int
    rows: tuple[AllReduceRow, ...]
    avg_busbw_gbs: float | None
    transport: NcclTransport

    @property
    def largest(self) -> AllReduceRow | None:
        """The row of the largest message (the one that shows the links' bandwidth)."""
        return max(self.rows, key=lambda row: row.size_bytes) if self.rows else None


def parse_all_reduce_perf(output: str) -> AllReducePerf:
    """Read `all_reduce_perf` output: rank lines, the table, the footer, NCCL lines.

    The time column loses its decimals at ≥ 10000 µs, `#wrong` is `N/A` with
    `-c 0`, older nccl-tests have no `redop` column, and NCCL lines may sit
    anywhere, even between the table and the footer.
    """
    lines = output.splitlines()
    hosts: list[str] = []
    ranks = 0
    rows: list[AllReduceRow] = []
    avg: float | None = None
    for line in lines:
        if (rank := _RANK_LINE.search(line)) is not None:
            ranks += 1
            if rank.group("host") not in hosts:
                hosts.append(rank.group("host"))
            continue
        if (footer := _AVG_BUSBW.search(line)) is not None:
            avg = float(footer.group("value"))
            continue
        if (row := _DATA_ROW.match(line)) is not None:
            numbers = [float(value) for value in row.groups()[5:8] + row.groups()[9:12]]
            rows.append(
                AllReduceRow(
                    size_bytes=int(row.group("size")),
                    out_of_place_us=numbers[0],
                    out_of_place_algbw_gbs=numbers[1],
                    out_of_place_busbw_gbs=numbers[2],
                    in_place_us=numbers[3],
                    in_place_algbw_gbs=numbers[4],
                    in_place_busbw_gbs=numbers[5],
                )
            )
    return AllReducePerf(
        hosts=tuple(hosts),
        rank_count=ranks,
        rows=tuple(rows),
        avg_busbw_gbs=avg,
        transport=parse_nccl_transport(lines),
    )
