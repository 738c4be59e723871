"""What the Pilot walks on the live demo share: waiting for a condition, counting ready nodes."""

from __future__ import annotations

import time
from collections.abc import Callable

from llmgw_tui.app import LlmgwApp


async def until(pilot, condition: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
    """Pause the pilot until `condition` holds, or fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:g} s for {what}")
        await pilot.pause(0.1)


def ready_nodes(app: LlmgwApp) -> int:
    """How many of the console's nodes are ready (0 before the fleet is known)."""
    return sum(n.state == "ready" for n in app.fleet.nodes) if app.fleet else 0
