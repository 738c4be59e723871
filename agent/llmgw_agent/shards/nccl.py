"""A shard's NCCL lines, read from the start of its log: what NCCL chose is said once, early.

`shard.logs` gives the newest lines; NCCL names its network, adapters and
channels when a communicator is made, minutes before. This reads the whole
kept log (the older file first) and returns only NCCL's own `INFO` and
`WARN` lines — the first `limit` of them — so the console can tell which
transport each shard took without moving the log.
"""

from __future__ import annotations

from typing import List

from llmgw_agent.logcap import LOG_NAME

_MARKERS = (b"NCCL INFO", b"NCCL WARN")


def nccl_lines(shard_id: str, limit: int) -> dict:
    """The first `limit` NCCL INFO/WARN lines of a shard's kept log.

    Returns:
        `{"lines": [...], "truncated": bool}`; `truncated` when more were found.

    Raises:
        OpError: `not_found` for an unknown shard.
    """
    from llmgw_agent.shards.records import shard_directory

    directory = shard_directory(shard_id)
    found: List[str] = []
    truncated = False
    for path in (directory / (LOG_NAME + ".1"), directory / LOG_NAME):
        try:
            handle = open(path, "rb")  # noqa: SIM115 closed below, line by line
        except FileNotFoundError:
            continue
        with handle:
            for raw in handle:
                if not any(marker in raw for marker in _MARKERS):
                    continue
                if len(found) >= limit:
                    truncated = True
                    break
                found.append(raw.rstrip(b"\r\n").decode("utf-8", "replace"))
        if truncated:
            break
    return {"lines": found, "truncated": truncated}
