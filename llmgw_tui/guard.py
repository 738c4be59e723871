"""One guard for the whole console: what a screen's code raises is a line, never an exit.

Textual ends the app on any exception that escapes a handler, an action, a
timer or a worker (`App._handle_exception`), and the message loop of the
widget whose handler raised stops for good. An operator who loses the
console mid-incident loses the view of the fleet it holds, so:

- an `LlmgwError` (`BadInput` included) is the operator's or the fleet's
  fault: its sentence becomes a red notification titled with the screen it
  came from, and the console goes on;
- anything else is our fault: its traceback is appended to
  `console-errors.log` in the user's state folder (`$XDG_STATE_HOME/llmgw`,
  else `~/.local/state/llmgw`; the folder 0700, the file 0600), one red
  line names that file, and the console goes on where it safely can.

The same sentence is not repeated while it keeps coming (a draw that fails
at every frame says so once). Everything caught is kept in `caught`, so a
test can assert that nothing reached the guard at all.

Textual has no public hook for "a handler raised": the two private members
that stand in for one are overridden in `llmgw_tui.textual_hooks` (`Guarded`
and `GuardedApp`), which hand what they catch to this guard.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmgw_core.errors import LlmgwError

if TYPE_CHECKING:
    from textual.app import App

ERROR_LOG_NAME = "console-errors.log"
QUIET_S = 5.0
"""The same sentence again within this many seconds is kept, not shown again."""
KEPT_CAUGHT = 200
"""How many caught errors `caught` keeps (the oldest go)."""


def state_dir() -> Path:
    """The user's state folder for the console (`$XDG_STATE_HOME/llmgw`, else ~/.local/state/llmgw)."""
    from llmgw_core.user_dirs import state_home

    return state_home() / "llmgw"


@dataclass(frozen=True)
class Caught:
    """An exception the guard caught: `refused` (an LlmgwError) or `fault` (anything else)."""

    kind: str
    where: str
    sentence: str
    error: BaseException


class ConsoleGuard:
    """Turns what escapes the console's code into a red line, and keeps a record of it."""

    def __init__(self, app: App[Any]) -> None:
        self._app = app
        _GUARDS[app] = self
        self.caught: list[Caught] = []
        """What reached the guard, oldest first (at most `KEPT_CAUGHT`)."""
        self._shown_at: dict[str, float] = {}

    def catch(self, error: BaseException, where: str) -> None:
        """Say what went wrong in one red line and record it; the console goes on."""
        if isinstance(error, LlmgwError):
            kind, sentence = "refused", error.sentence()
        else:
            kind, sentence = "fault", self._log_fault(error, where)
        self.caught.append(Caught(kind, where, sentence, error))
        del self.caught[:-KEPT_CAUGHT]
        now = time.monotonic()
        if now - self._shown_at.get(sentence, -QUIET_S) < QUIET_S:
            return
        self._shown_at[sentence] = now
        try:
            self._app.notify(sentence, title=where, severity="error", timeout=15)
        except Exception:  # a closing app has nowhere to show it; the record is kept
            return

    @property
    def faults(self) -> list[Caught]:
        """What was caught that was not an `LlmgwError` (each a bug of ours)."""
        return [c for c in self.caught if c.kind == "fault"]

    def _log_fault(self, error: BaseException, where: str) -> str:
        """Append the traceback to the error log; the one line that names it."""
        what = f"{type(error).__name__} in {where}"
        path = state_dir() / ERROR_LOG_NAME
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as log:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                log.write(f"--- {stamp} {what}\n")
                log.write("".join(traceback.format_exception(error)))
        except OSError as exc:
            return f"{what}: {error} (its traceback could not be written: {exc.strerror or exc})"
        return f"{what}: {_first_line(error)} — traceback in {path}; the console goes on"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:160] if text else "no message"


def where_of(node: object) -> str:
    """The title a caught error is shown under: its screen's sub-title, else the class's name."""
    with contextlib.suppress(Exception):  # an app without a screen yet is named by its class
        node = getattr(node, "screen", node)  # the app's current screen; a screen is its own
    sub_title = getattr(node, "sub_title", "")
    return str(sub_title or type(node).__name__)


_GUARDS: weakref.WeakKeyDictionary[App[Any], ConsoleGuard] = weakref.WeakKeyDictionary()
"""Each guarded app's guard (an app without one lets what its screens raise end it)."""


def guard_of(app: App[Any]) -> ConsoleGuard | None:
    """The app's guard; None for an app without one (a screen mounted on a bare App in a test)."""
    return _GUARDS.get(app)


__all__ = ["ERROR_LOG_NAME", "Caught", "ConsoleGuard", "guard_of", "state_dir", "where_of"]
