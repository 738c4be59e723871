"""A shard's first lines, read from the start of its log: what an engine says once, early.

`shard.logs` gives the newest lines; NCCL names its network, adapters and
channels when a communicator is made, and an engine its weights, KV cache and
concurrency while it starts, minutes before. These read the whole kept log
(the older file first) from its start: `shard.nccl` only NCCL's own `INFO`
and `WARN` lines (and a KV transfer's path), `shard.head` every line — the first `limit` of them — so the
console can read them without moving the log.

A decode worker also logs each KV hand-off it received (`KV transfer: received N bytes in X ms
(Y GB/s)`), one line per request for as long as it serves: `shard.nccl` keeps those apart, the
last `recent` of them, so the replica page shows the rate requests get now and a busy worker's
hand-offs never crowd NCCL's start-up lines out of the first `limit`.
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Optional, Tuple

from llmgw_agent.logcap import LOG_NAME

_MARKERS = (b"NCCL INFO", b"NCCL WARN", b"KV transfer:", b"UCX  INFO  ep_cfg")
"""NCCL's own lines, and what names a prefill/decode worker's KV path: UCX's endpoint lines
(NIXL), the sim's transfer line."""

HANDOFF = b"KV transfer: received "
"""What a decode worker's line per received hand-off holds (the sim's `received_line`)."""


def nccl_lines(shard_id: str, limit: int, recent: int = 0) -> dict:
    """The first `limit` NCCL INFO/WARN and KV-path lines of a shard's kept log, and the last
    `recent` KV hand-off lines.

    Returns:
        `{"lines": [...], "truncated": bool, "recent": [...]}`; `truncated` when more were found.

    Raises:
        OpError: `not_found` for an unknown shard.
    """
    return first_lines(shard_id, limit, _MARKERS, recent)


def first_lines(
    shard_id: str, limit: int, markers: Optional[Tuple[bytes, ...]] = None, recent: int = 0
) -> dict:
    """The first `limit` lines of a shard's kept log (those holding a marker, when given).

    With `recent`, the hand-off lines (`HANDOFF`) are not among the first: the last `recent` of
    them are given apart, read in the same pass.

    Returns:
        `{"lines": [...], "truncated": bool}`, and `"recent": [...]` when `recent` was asked.

    Raises:
        OpError: `not_found` for an unknown shard.
    """
    from llmgw_agent.shards.records import shard_directory

    directory = shard_directory(shard_id)
    found = []
    handoffs: Deque[bytes] = deque(maxlen=recent or 1)
    truncated = False
    for path in (directory / (LOG_NAME + ".1"), directory / LOG_NAME):
        try:
            handle = open(path, "rb")  # noqa: SIM115 closed below, line by line
        except FileNotFoundError:
            continue
        with handle:
            for raw in handle:
                if markers is not None and not any(marker in raw for marker in markers):
                    continue
                if recent and HANDOFF in raw:
                    handoffs.append(raw)
                    continue
                if truncated:
                    continue  # read on only for the last hand-offs
                if len(found) >= limit:
                    truncated = True
                    if not recent:
                        break
                    continue
                found.append(raw.rstrip(b"\r\n").decode("utf-8", "replace"))
        if truncated and not recent:
            break
    answer = {"lines": found, "truncated": truncated}
    if recent:
        answer["recent"] = [raw.rstrip(b"\r\n").decode("utf-8", "replace") for raw in handoffs]
    return answer
