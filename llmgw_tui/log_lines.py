"""What the logs screen keeps of a stream of engine lines, and how each is shown (no widgets).

Lines arrive in batches from a worker; they wait in `pending` until the
screen's timer flushes them into the `Log` widget in one write (never one
write per line). Every line seen is kept, capped, with its arrival time, so a
filter, wrap or timestamps change redraws from what was seen.
"""

from __future__ import annotations

import re
import textwrap
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from llmgw_core.fabric.nccl import NcclTransport, parse_nccl_transport
from llmgw_core.fabric.paths import NvlinkMatrix, inside_path, shm_warning, transport_label
from llmgw_core.fabric.verdicts import transport_warnings

KEPT_LINES = 200_000
"""Lines kept for redraws and saving; older ones are dropped."""

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def strip_ansi(line: str) -> str:
    """The line without terminal escapes (colours, cursor moves, titles) and trailing newline."""
    return _ANSI.sub("", line).rstrip("\r\n")


@dataclass(frozen=True)
class ShowOptions:
    """How lines are drawn: filter text, wrap width (None: no wrap), timestamps."""

    needle: str = ""
    wrap_width: int | None = None
    timestamps: bool = False


class LogLines:
    """Every line seen (capped), those waiting to be drawn, and NCCL's transport so far."""

    def __init__(self, kept: int = KEPT_LINES) -> None:
        self.kept: deque[tuple[float, str]] = deque(maxlen=kept)
        self.pending: list[tuple[float, str]] = []
        self.seen = 0
        """Lines seen in all, dropped ones included."""
        self._nccl_lines: deque[str] = deque(maxlen=2_000)
        self.transport: NcclTransport | None = None

    def add(self, lines: Iterable[str], arrived_s: float) -> None:
        """Queue a batch that arrived at `arrived_s` (epoch seconds), escapes stripped."""
        for raw in lines:
            self.pending.append((arrived_s, strip_ansi(raw)))

    def take(self) -> list[tuple[float, str]]:
        """The lines waiting to be drawn, now kept; NCCL's transport updated from them."""
        batch, self.pending = self.pending, []
        self.kept.extend(batch)
        self.seen += len(batch)
        nccl = [line for _, line in batch if "NCCL" in line]
        if nccl:
            self._nccl_lines.extend(nccl)
            self.transport = parse_nccl_transport(self._nccl_lines)
        return batch

    def label(self, node_count: int | None, topology: NvlinkMatrix | None) -> str | None:
        """What NCCL runs over so far (`NVLink`, `NVLink + IB + GDR`), as the replicas table says it."""
        if self.transport is None:
            return None
        inside = inside_path(self.transport, topology)
        return transport_label(self.transport, inside, node_count or 1)

    def shm_on_nvlink(self, replica: str, topology: NvlinkMatrix | None) -> str | None:
        """The core's sentence when NCCL joined NVLink cards through host memory."""
        if self.transport is None:
            return None
        inside = inside_path(self.transport, topology)
        return shm_warning(replica, "its node", inside) if inside is not None else None

    def socket_fallback(self, replica: str, node_count: int | None) -> str | None:
        """The core's sentence when NCCL carries traffic between nodes over TCP sockets.

        The rule is `fabric.transport_warnings`'s: a replica within one node
        sends nothing over the network, so its `Socket` is no fallback.
        """
        if self.transport is None:
            return None
        said = transport_warnings(replica, {"its ranks": self.transport}, None, node_count)
        return said[0] if said else None


def shown(batch: Iterable[tuple[float, str]], options: ShowOptions) -> list[str]:
    """The display lines of `batch`: filtered, time-stamped and wrapped as `options` say."""
    needle = options.needle.lower()
    out: list[str] = []
    for arrived_s, line in batch:
        if needle and needle not in line.lower():
            continue
        text = line
        if options.timestamps:
            text = f"{datetime.fromtimestamp(arrived_s).strftime('%H:%M:%S.%f')[:12]} {text}"
        if options.wrap_width and len(text) > options.wrap_width:
            out.extend(
                textwrap.wrap(
                    text,
                    options.wrap_width,
                    subsequent_indent="  ",
                    drop_whitespace=False,
                    break_on_hyphens=False,
                )
                or [""]
            )
        else:
            out.append(text)
    return out
