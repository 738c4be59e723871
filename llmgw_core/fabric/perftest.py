"""Reading what a bandwidth test printed: `ib_write_bw` (perftest) and our TCP test.

The agent runs the tool and returns its raw output; this module is the one
place that reads it. `ib_write_bw` prints its table in one of three units:
`Gb/sec` with `--report_gbits` (decimal gigabits), `MB/sec` (older perftest)
or `MiB/sec` (newer) — both of the latter are 2^20 bytes per second. Every
figure here is converted to Gb/s so it can be set against a rail's rated
speed, which the adapters report in Gb/s.

Quirks handled (seen in captures and perftest's own docs): the server's
"Waiting for client to connect" banner, the preamble in two columns, `-D`
duration mode (BW peak printed as 0.00 with a WARNING line), CPU-frequency
warnings between table rows, and a run that failed before any table.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

BITS_PER_MIB = 8 * 2**20
"""perftest's "MB" is 2^20 bytes (MsgRate × size = BW × 2^20 in the captures)."""

BandwidthUnit = Literal["Gb/sec", "MB/sec", "MiB/sec"]
Side = Literal["server", "client"]
Failure = Literal["unreachable", "down", "no-device", "no-result"]

_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+BW average\[")
_ROW = re.compile(
    r"(?:^|\s)(?P<size>\d+)\s+(?P<iterations>\d+)\s+(?P<peak>\d+(?:\.\d+)?)"
    r"\s+(?P<average>\d+(?:\.\d+)?)\s+(?P<msg_rate>\d+(?:\.\d+)?)\s*$"
)
_ADDRESS = re.compile(r"^\s*(?P<end>local|remote) address:.*?\bQPN\s+(?P<qpn>0x[0-9a-fA-F]+)")
_PREAMBLE_PAIR = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9 .*_/-]*?)\s*:\s*(?P<value>\S+)")

_UNREACHABLE_MARKS = (
    "couldn't connect to",
    "unable to init the socket connection",
    "failed to establish connection",
    "couldn't resolve",
    "no route to host",
)
_DOWN_MARKS = ("state is down", "port state is down", "is not active", "link is down")
_NO_DEVICE_MARKS = (
    "unable to find the infiniband/roce device",
    "ib device",
    "couldn't get context for the device",
    "no ib devices found",
)


class BandwidthRow(BaseModel):
    """One row of the result table, in Gb/s whatever unit the tool printed."""

    model_config = ConfigDict(frozen=True)

    size_bytes: int
    iterations: int
    peak_gbps: float | None
    """None in `-D` duration mode, where perftest does not measure the peak."""
    average_gbps: float
    msg_rate_mpps: float


class IbWriteBw(BaseModel):
    """What one side of an `ib_write_bw` run printed, read.

    Attributes:
        side: `server` when the "Waiting for client" banner is there, else `client`.
        device: the adapter (`Device : mlx5_0`).
        link_type: `IB` or `Ethernet` (RoCE), as perftest names it.
        gid_index: the GID index used (RoCE), when printed.
        mtu_bytes: the path MTU, when printed.
        qps: number of queue pairs.
        unit: the unit the table was printed in.
        rows: the table, converted to Gb/s.
        duration_mode: True when run with `-D` (no peak measured).
        warnings: perftest's own warning lines, as printed.
        failure: why there is no table (`unreachable`, `down`, `no-device`,
            `no-result`), or None when there is one.
        error_lines: the lines that explain a failure, as printed.
        local_qpns: this side's queue pairs (`local address: … QPN 0x…`), sorted.
        remote_qpns: the queue pairs of the side it ran with (`remote address:`), sorted.
    """

    model_config = ConfigDict(frozen=True)

    side: Side
    device: str | None = None
    link_type: str | None = None
    gid_index: int | None = None
    mtu_bytes: int | None = None
    qps: int | None = None
    unit: BandwidthUnit | None = None
    rows: tuple[BandwidthRow, ...] = ()
    duration_mode: bool = False
    warnings: tuple[str, ...] = ()
    failure: Failure | None = None
    error_lines: tuple[str, ...] = ()
    local_qpns: tuple[int, ...] = ()
    remote_qpns: tuple[int, ...] = ()

    @property
    def average_gbps(self) -> float | None:
        """The BW average of the largest message size (the figure a rail is judged on)."""
        if not self.rows:
            return None
        return max(self.rows, key=lambda row: row.size_bytes).average_gbps


def to_gbps(value: float, unit: BandwidthUnit) -> float:
    """A perftest bandwidth figure in Gb/s (decimal gigabits per second)."""
    if unit == "Gb/sec":
        return value
    return value * BITS_PER_MIB / 1e9


def _unit(text: str) -> BandwidthUnit:
    cleaned = text.strip()
    if cleaned in ("Gb/sec", "MB/sec", "MiB/sec"):
        return cleaned  # type: ignore[return-value]
    if cleaned.lower().startswith("gb"):
        return "Gb/sec"
    return "MiB/sec"


def _preamble(lines: list[str]) -> dict[str, str]:
    """The `Key : Value` pairs of the preamble (two per line in places)."""
    values: dict[str, str] = {}
    for line in lines:
        if ":" not in line or line.lstrip().startswith(("#", "local address", "remote address")):
            continue
        for match in _PREAMBLE_PAIR.finditer(line):
            key = " ".join(match.group("key").split())
            values.setdefault(key, match.group("value"))
    return values


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    match = re.match(r"\d+", text)
    return int(match.group(0)) if match else None


def _failure(lines: list[str]) -> tuple[Failure, tuple[str, ...]]:
    """Why a run printed no table, with the lines that say so."""
    for marks, failure in (
        (_UNREACHABLE_MARKS, "unreachable"),
        (_DOWN_MARKS, "down"),
        (_NO_DEVICE_MARKS, "no-device"),
    ):
        hits = tuple(line.strip() for line in lines if any(m in line.lower() for m in marks))
        if hits:
            return failure, hits  # type: ignore[return-value]
    tail = tuple(line.strip() for line in lines if line.strip())[-3:]
    return "no-result", tail


def parse_ib_write_bw(output: str) -> IbWriteBw:
    """Read the output of one side of `ib_write_bw` (server or client).

    Args:
        output: stdout and stderr of the tool, as printed.

    Returns:
        The run read; `failure` says why when there is no result table.
    """
    lines = output.splitlines()
    side: Side = (
        "server" if any("waiting for client" in line.lower() for line in lines) else "client"
    )
    preamble = _preamble([line for line in lines if not _ROW.search(line)])
    unit: BandwidthUnit | None = None
    rows: list[BandwidthRow] = []
    warnings: list[str] = []
    for line in lines:
        header = _HEADER.search(line)
        if header:
            unit = _unit(header.group("unit"))
            continue
        if "warning" in line.lower() or "conflicting cpu frequency" in line.lower():
            warnings.append(line.strip())
        row = _ROW.search(line) if unit else None
        if row and unit:
            peak = float(row.group("peak"))
            rows.append(
                BandwidthRow(
                    size_bytes=int(row.group("size")),
                    iterations=int(row.group("iterations")),
                    peak_gbps=to_gbps(peak, unit) if peak > 0 else None,
                    average_gbps=to_gbps(float(row.group("average")), unit),
                    msg_rate_mpps=float(row.group("msg_rate")),
                )
            )
    duration_mode = any("bw peak won't be measured" in w.lower() for w in warnings)
    qpns: dict[str, list[int]] = {"local": [], "remote": []}
    for line in lines:
        address = _ADDRESS.match(line)
        if address:
            qpns[address.group("end")].append(int(address.group("qpn"), 16))
    failure: Failure | None = None
    error_lines: tuple[str, ...] = ()
    if not rows:
        failure, error_lines = _failure(lines)
    return IbWriteBw(
        side=side,
        device=preamble.get("Device"),
        link_type=preamble.get("Link type"),
        gid_index=_int_or_none(preamble.get("GID index")),
        mtu_bytes=_int_or_none(preamble.get("Mtu")),
        qps=_int_or_none(preamble.get("Number of qps")),
        unit=unit,
        rows=tuple(rows),
        duration_mode=duration_mode,
        warnings=tuple(warnings),
        failure=failure,
        error_lines=error_lines,
        local_qpns=tuple(sorted(qpns["local"])),
        remote_qpns=tuple(sorted(qpns["remote"])),
    )


class TcpThroughput(BaseModel):
    """What the agent's own TCP test measured over the management network.

    This is never the fabric: it says what a plain TCP stream between the two
    management interfaces carries, which is what NCCL's Socket fallback gets.
    """

    model_config = ConfigDict(frozen=True)

    side: Side
    bytes_moved: int
    seconds: float
    gbps: float
    interface_address: str | None = None


def read_tcp_result(result: dict) -> TcpThroughput:
    """The agent's `method: tcp` answer, checked.

    Raises:
        ValueError: (via pydantic) when the answer lacks a figure.
    """
    return TcpThroughput(
        side=result["side"],
        bytes_moved=int(result["bytes"]),
        seconds=float(result["seconds"]),
        gbps=float(result["gbps"]),
        interface_address=result.get("address"),
    )
