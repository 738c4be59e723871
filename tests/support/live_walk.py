"""What the Pilot walks on: waiting for a condition, the command palette's answer, ready nodes."""

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


def palette_answered(app, typed: str) -> bool:
    """The command palette is open on `typed`, its search has ended, and it found a command.

    Its hits arrive in batches a quarter of a second apart: `enter` before the search ends
    can run a command of the first batch, not the best one.
    """
    from textual.command import CommandList, CommandPalette
    from textual.widgets import Input

    palette = app.screen
    if not isinstance(palette, CommandPalette) or palette.query_one(Input).value != typed:
        return False
    group = CommandPalette._GATHER_COMMANDS_GROUP
    searching = any(w.group == group and not w.is_finished for w in app.workers)
    return not searching and palette.query_one(CommandList).option_count > 0


def ready_nodes(app: LlmgwApp) -> int:
    """How many of the console's nodes are ready (0 before the fleet is known)."""
    return sum(n.state == "ready" for n in app.fleet.nodes) if app.fleet else 0
