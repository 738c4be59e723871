"""What a screen may reach of the app: `ConsoleApp`, the console's side of the contract.

Screens (and the palette's commands) are given the app through
`Guarded.console_app`, cast to this protocol rather than to `LlmgwApp`: they
depend on four members, not on the app's module, so nothing a screen imports
leads back to the app that imports every screen. `LlmgwApp` keeps the
contract; `tests/tui/test_console_app.py` checks it does, for mypy and at
run time. What a screen asks of the fleet goes through `feed`, whose own
contract is `FleetFeed`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from textual.signal import Signal

    from llmgw_core.views.fleet import FleetSummary
    from llmgw_tui.feed.protocol import FleetFeed


@runtime_checkable
class ConsoleApp(Protocol):
    """The app as a screen sees it: read-only, so no screen replaces what the app owns."""

    @property
    def feed(self) -> FleetFeed:
        """Where fleet snapshots come from, and every call a screen makes into the core."""
        ...

    @property
    def fleet(self) -> FleetSummary | None:
        """The latest snapshot, None until the first arrives."""
        ...

    @property
    def fleet_changed(self) -> Signal[FleetSummary]:
        """Published with each new snapshot."""
        ...

    @property
    def fleet_failed(self) -> Signal[str]:
        """Published with the sentence when the fleet cannot be read."""
        ...
