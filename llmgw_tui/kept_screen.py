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

from llmgw_tui.textual_hooks import Guarded, mark_styles_current

ResultType = TypeVar("ResultType")


class KeptScreen(Guarded, Screen[ResultType]):
    """A mode's screen: shown again as it was left, its widgets not restyled."""

    def __init__(self) -> None:
        super().__init__()
        mark_styles_current(self, self.app)
        self._first_shown = False

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        """Come back without restyling every widget (Textual's own handler runs after this)."""
        event.refresh_styles = False
        if not self._first_shown:
            self._first_shown = True
            self.on_first_show()

    def quit_held(self) -> bool:
        """True when `q` should not quit yet: the screen holds typed work and has said so."""
        return False

    def on_first_show(self) -> None:
        """Start the screen's readers (polls, workers) the first time it is shown.

        A screen built ahead of time, while the console was idle, must not
        read the fleet or the agents before anyone looks at it.
        """

    async def prepare(self) -> None:
        """Build, while the console is idle, what the screen's first frame left out."""
