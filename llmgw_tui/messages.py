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


# --- what a worker read, handed to its screen to draw -----------------------------------
# A worker asks the fleet (seconds, on other machines) and posts what it found; the
# screen's handler draws it. No worker writes into a widget.


class Read(Message):
    """What a worker read, or the sentence why it could not (`error`).

    `found` is whatever the reader returns (the replicas, a node's checks, the
    gateways' details …); each screen's handler knows which.
    """

    def __init__(self, found: object = None, *, error: str | None = None) -> None:
        super().__init__()
        self.found = found
        self.error = error


class NodeShardsRead(Read):
    """The lines of the shards a node runs (`views.replicas.shards_on_node`)."""


class NodeDoctorRead(Read):
    """A node's doctor checks."""


class DoctorRowsRead(Read):
    """Every asked node's doctor checks, one row each (`found`: (rows, node count))."""


class FabricTested(Read):
    """A fabric test's result (`found`: (result, its failure sentence or None))."""


class GatewaysRead(Read):
    """Every running gateway's details (`gateway_details`)."""


class ReplicasRead(Read):
    """The replicas, their downloads, their engines' loads and their Slurm jobs (`found`:
    (views, downloads, loads, jobs))."""


class PreviewRead(Read):
    """What `serve` would start (`found`: (request, the preview or None)).

    `adapters`: set when it is the adapters typed that were refused (their files
    cannot be read or do not fit the model): the text they were refused as.
    """

    def __init__(
        self, found: object = None, *, error: str | None = None, adapters: str | None = None
    ) -> None:
        super().__init__(found, error=error)
        self.adapters = adapters
