"""`:` command mode: a line at the bottom that takes `:racks`, `:node NAME` …; errors in red."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from llmgw_tui.commands import CommandError, ParsedCommand, known_names, parse_command
from llmgw_tui.fields import Checked, command_refusal, reason
from llmgw_tui.textual_hooks import Guarded


class CommandLine(Guarded, ModalScreen[ParsedCommand | None]):
    """A k9s-style command line; dismisses with the parsed command, or None on esc."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="command-cancel")
    ]

    def compose(self) -> ComposeResult:
        """The error line (empty until a command fails) above the input."""
        with Vertical(id="command-box"):
            self._command_error = Static("", id="command-error", markup=False)
            yield self._command_error
            self._command_input = (
                Input(  # its reason goes in the error line above, not on its border
                    placeholder=f"command: {known_names()}",
                    id="command-input",
                    validators=[Checked(command_refusal)],
                )
            )
            yield self._command_input

    def on_mount(self) -> None:
        """Blinking is a clock: keep it off so frames do not depend on time."""
        field = self._command_input
        field.cursor_blink = False
        field.focus()

    @on(Input.Submitted, "#command-input")
    def _submitted(self, event: Input.Submitted) -> None:
        error_line = self._command_error
        try:
            command = parse_command(event.value)
        except CommandError as error:
            error_line.update(str(error))
            error_line.add_class("-error")
            return
        self.dismiss(command)

    @on(Input.Changed, "#command-input")
    def _changed(self, event: Input.Changed) -> None:
        """The reason in red as soon as what is typed cannot be a command; nothing else."""
        error_line = self._command_error
        why = reason(event.input)
        error_line.update(why or "")
        error_line.set_class(why is not None, "-error")

    def action_cancel(self) -> None:
        """Leave command mode without running anything."""
        self.dismiss(None)
