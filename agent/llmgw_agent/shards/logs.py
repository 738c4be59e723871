"""A shard's log sent over the wire: its tail, then what it writes next.

Built on `logcap` (the capped files and how to read them) and `shards`
(where a shard lives and what phase it is in); neither imports this module.
"""

from __future__ import annotations

import threading
from typing import Callable, List

from llmgw_agent.logcap import LOG_NAME, LogFollower, tail_lines
from llmgw_agent.shards.records import shard_directory, shard_phase

_EVENT_LINES = 500
"""At most this many lines travel in one `{"lines": [...]}` event."""

_FOLLOW_POLL_S = 0.2


def _emit_batched(lines: List[str], emit: Callable[[dict], None]) -> None:
    for start in range(0, len(lines), _EVENT_LINES):
        emit({"lines": lines[start : start + _EVENT_LINES]})


def stream_shard_log(
    shard_id: str,
    tail: int,
    follow: bool,
    emit: Callable[[dict], None],
    cancelled: threading.Event,
) -> dict:
    """Send the last `tail` lines of a shard's log, then (with `follow`) what it writes next.

    Lines travel in `{"lines": [...]}` events of at most 500. A follow ends
    when cancelled, or once the shard is over and its log read to the end.

    Returns:
        `{"lines_sent", "cancelled", "phase"}`.

    Raises:
        OpError: `not_found` for an unknown shard.
    """
    directory = shard_directory(shard_id)
    follower = LogFollower(directory / LOG_NAME) if follow else None
    # The tail ends where the follow begins: no line is sent twice or missed.
    lines = tail_lines(directory, tail, follower.start_offset if follower else None)
    _emit_batched(lines, emit)
    sent = len(lines)
    phase = shard_phase(shard_id)
    if follower is None:
        return {"lines_sent": sent, "cancelled": False, "phase": phase}
    try:
        polls = 0
        while not cancelled.wait(_FOLLOW_POLL_S):
            fresh = follower.read_new()
            _emit_batched(fresh, emit)
            sent += len(fresh)
            polls += 1
            if polls % 5 == 0 or phase not in ("starting", "running"):
                phase = shard_phase(shard_id)
                if phase not in ("starting", "running"):
                    fresh = follower.read_new()
                    _emit_batched(fresh, emit)
                    return {"lines_sent": sent + len(fresh), "cancelled": False, "phase": phase}
        return {"lines_sent": sent, "cancelled": True, "phase": shard_phase(shard_id)}
    finally:
        follower.close()
