"""`?`: every key of the screen underneath, with what it does."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from llmgw_tui.textual_hooks import Guarded


class HelpScreen(Guarded, ModalScreen[None]):
    """A modal table of the keys of one screen."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "dismiss", "Close", id="help-close"),
    ]

    def __init__(self, screen_title: str, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self._screen_title = screen_title
        self._keys = keys

    def compose(self) -> ComposeResult:
        """The title and one row per key."""
        with Vertical(id="help-box"):
            yield Static(
                f"Keys of {self._screen_title}", id="help-title", classes="title", markup=False
            )
            table: DataTable[Text] = DataTable(
                id="help-keys", cursor_type="row", zebra_stripes=True
            )
            table.add_columns("KEY", "WHAT IT DOES")
            for key, description in self._keys:
                table.add_row(Text(key), Text(description))
            yield table
            yield Static(
                "esc closes · : command mode · ctrl+p palette", id="help-hint", classes="hint"
            )

    async def action_dismiss(self, result: None = None) -> None:
        """Close the help."""
        self.dismiss(result)
