"""A shard's first lines, read from the start of its log: what an engine says once, early.

`shard.logs` gives the newest lines; NCCL names its network, adapters and
channels when a communicator is made, and an engine its weights, KV cache and
concurrency while it starts, minutes before. These read the whole kept log
(the older file first) from its start: `shard.nccl` only NCCL's own `INFO`
and `WARN` lines (and a KV transfer's path), `shard.head` every line — the first `limit` of them — so the
console can read them without moving the log.
"""

from __future__ import annotations

from typing import Optional, Tuple

from llmgw_agent.logcap import LOG_NAME

_MARKERS = (b"NCCL INFO", b"NCCL WARN", b"KV transfer:", b"UCX  INFO  ep_cfg")
"""NCCL's own lines, and what names a prefill/decode worker's KV path: UCX's endpoint lines
(NIXL), the sim's transfer line."""


def nccl_lines(shard_id: str, limit: int) -> dict:
    """The first `limit` NCCL INFO/WARN lines of a shard's kept log.

    Returns:
        `{"lines": [...], "truncated": bool}`; `truncated` when more were found.

    Raises:
        OpError: `not_found` for an unknown shard.
    """
    return first_lines(shard_id, limit, _MARKERS)


def first_lines(shard_id: str, limit: int, markers: Optional[Tuple[bytes, ...]] = None) -> dict:
    """The first `limit` lines of a shard's kept log (those holding a marker, when given).

    Returns:
        `{"lines": [...], "truncated": bool}`; `truncated` when more were found.

    Raises:
        OpError: `not_found` for an unknown shard.
    """
    from llmgw_agent.shards.records import shard_directory

    directory = shard_directory(shard_id)
    found = []
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
                if len(found) >= limit:
                    truncated = True
                    break
                found.append(raw.rstrip(b"\r\n").decode("utf-8", "replace"))
        if truncated:
            break
    return {"lines": found, "truncated": truncated}
