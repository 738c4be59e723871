"""What a screen asks of the app: messages that bubble up to it, not calls into it.

A screen does not reach into the app to open another screen; it posts one
of these, and the app (`LlmgwApp.on_open_*`) does it as the matching `:`
command and palette action would.
"""

from __future__ import annotations

from textual.message import Message


class OpenNode(Message):
    """Show the page of node `name` (a red line when the fleet has none by that name)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class OpenReplica(Message):
    """Show the replicas screen with the cursor on replica `name` (now, or once it appears)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class OpenLogs(Message):
    """Follow the log of replica `name` (`rank`: one rank's, None: every rank merged),
    or of the gateway `name`."""

    def __init__(self, name: str, rank: int | None = None, *, gateway: bool = False) -> None:
        super().__init__()
        self.name = name
        self.rank = rank
        self.gateway = gateway
