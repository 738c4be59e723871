"""A top-level screen kept across screen switches, and shown again without restyling.

The console's top-level screens are Textual modes: each is built once and
kept while another is shown. Textual restyles every widget of a mode's
screen each time it comes back (and the fleet table then renders its rows
anew), although nothing its styles depend on changed: a theme change goes
through Textual's own stylesheet refresh, which a switch already runs when
needed. Skipping that restyle makes a switch cost a repaint, not a restyle.
"""

from __future__ import annotations

from typing import TypeVar

from textual import events
from textual.screen import Screen

ResultType = TypeVar("ResultType")


class KeptScreen(Screen[ResultType]):
    """A mode's screen: shown again as it was left, its widgets not restyled."""

    def on_mount(self) -> None:
        """Mark the screen's styles as current (Textual 8.2 leaves a new mode's screen marked stale).

        A screen made by a mode is styled as it mounts, after the switch that
        made it checked its stylesheet count, so the next switch to it
        restyled the whole app once more.
        """
        self._css_update_count = self.app._css_update_count

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        """Come back without restyling every widget (Textual's own handler runs after this)."""
        event.refresh_styles = False
