"""How a start is followed: its trace, node by node, and when anything last moved.

`serve` fails a start that shows no progress for its startup timeout; a
process starting, a node's download growing, health answering — each moves
the clock (`StartProgress`). `watch_download` follows one node's download
with the agent's `download.watch`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from llmgw_agent.ops import Op
from llmgw_core.errors import LlmgwError
from llmgw_core.fleet.client import AgentLost


def hub_cache_dir(repo_id: str) -> str:
    """Where `huggingface_hub` keeps a repository on a node, relative to the node's home."""
    return ".cache/huggingface/hub/models--" + repo_id.replace("/", "--")


@dataclass
class Trace:
    """Every step of a start, node by node, with its time."""

    steps: list[dict[str, Any]] = field(default_factory=list)

    def add(self, step: str, node: str | None = None, detail: str | None = None) -> None:
        """Record one step now."""
        self.steps.append(
            {
                "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
                "node": node,
                "step": step,
                "detail": detail,
            }
        )


class StartProgress:
    """When anything last moved: a process starting, a download growing, health answering."""

    def __init__(self) -> None:
        self.last_moved = time.monotonic()
        self.fetched: dict[str, int] = {}
        self.first_seen: dict[str, tuple[float, int]] = {}

    def moved(self) -> None:
        self.last_moved = time.monotonic()

    def fetch_summary(self, node: str) -> str:
        """`12.3 GB at 410 MB/s` for one node's download so far."""
        fetched = self.fetched.get(node, 0)
        began_at, began_bytes = self.first_seen.get(node, (self.last_moved, fetched))
        seconds = max(self.last_moved - began_at, 1e-6)
        rate = (fetched - began_bytes) / seconds / 1e6
        return f"{fetched / 1024**3:.1f} GB at {rate:.0f} MB/s"


async def watch_download(
    fleet: Any, node: str, path: str, progress: StartProgress, trace: Trace
) -> None:
    """Follow a node's download of the weights; every byte that arrives counts as progress."""
    try:
        stream = fleet.client(node).stream(Op.DOWNLOAD_WATCH, {"path": path, "interval_s": 2})
    except (LlmgwError, AgentLost):
        return
    try:
        async for event in stream:
            fetched = int(event.get("bytes") or 0)
            if fetched and fetched != progress.fetched.get(node, 0):
                if node not in progress.fetched:
                    trace.add("fetch began", node, path)
                    progress.first_seen[node] = (time.monotonic(), fetched)
                progress.fetched[node] = fetched
                progress.moved()
    except (LlmgwError, AgentLost):
        return
    finally:
        with contextlib.suppress(LlmgwError, AgentLost):
            await stream.cancel()
