"""The console's guard: what a screen's code raises is a red line, and the console goes on.

One console over the demo snapshot, with a fleet screen that can be made to
raise from each place Textual runs our code: an action (a key), a message
handler, a worker, a timer. An `LlmgwError` is its sentence in red; anything
else is one line naming the log file that holds its traceback.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar

import pytest
from live_walk import until
from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.message_pump import MessagePump
from textual.widgets import DataTable

import llmgw_tui.app
from llmgw_core.errors import BadInput
from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import StaticFeed
from llmgw_tui.guard import ERROR_LOG_NAME
from llmgw_tui.screens.fleet import FleetScreen
from llmgw_tui.textual_hooks import Guarded


class Raise(Message):
    """Ask the faulty screen's handler to raise `error`."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error


class FaultyFleet(FleetScreen):
    """The fleet screen, plus ways to make it raise from each place our code runs."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f5", "refuse", "Refuse"),
        Binding("f6", "break_down", "Break"),
    ]
    error: Exception = BadInput("context 0 is not a context", "type a whole number above 0")

    def action_refuse(self) -> None:
        raise BadInput("fallbacks: 99 is not between 0 and 16")

    def action_break_down(self) -> None:
        raise ZeroDivisionError("division by zero in a test")

    def on_raise(self, message: Raise) -> None:
        raise message.error

    @work(group="faulty")  # exit_on_error left True: Textual would end the app
    async def fail_in_a_worker(self) -> None:
        raise self.error

    def fail_in_a_timer(self) -> None:
        self.set_timer(0.01, self._raise_now)

    def _raise_now(self) -> None:
        raise self.error


class FaultyApp(LlmgwApp):
    CSS_PATH: ClassVar = [Path(llmgw_tui.app.__file__).parent / "styles" / "app.tcss"]
    MODES: ClassVar = {**LlmgwApp.MODES, "fleet": FaultyFleet}


@pytest.fixture
def faulty_app(demo_state, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    def factory() -> FaultyApp:
        state, fabrics = demo_state
        return FaultyApp(StaticFeed(state, fabrics), animation="none")

    return factory


async def _settle(app: App, pilot) -> None:
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause(0.05)


def _notes(app: App) -> list[str]:
    return [n.message for n in app._notifications]


def test_a_refusal_from_an_action_is_a_red_line_and_the_console_goes_on(faulty_app):
    async def run() -> None:
        app = faulty_app()
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            await _settle(app, pilot)
            await pilot.press("f5")
            await pilot.pause()
            assert app.is_running
            assert "fallbacks: 99 is not between 0 and 16" in _notes(app)
            assert [(c.kind, c.where) for c in app.guard.caught] == [("refused", "fleet")]
            await pilot.press("2")  # the keys still work
            await pilot.pause()
            assert app.current_mode == "racks"

    asyncio.run(run())


def test_a_refusal_from_a_handler_leaves_the_screen_handling_what_comes_next(faulty_app):
    async def run() -> None:
        app = faulty_app()
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            await _settle(app, pilot)
            screen = app.screen
            screen.post_message(Raise(BadInput("'nope' is not KEY=VALUE")))
            await pilot.pause()
            assert "'nope' is not KEY=VALUE" in _notes(app)
            # Textual stops a pump whose handler raised; the guarded screen keeps going.
            table = screen.query_one(DataTable)
            table.move_cursor(row=0)
            await pilot.press("down", "enter")
            await pilot.pause()
            assert type(app.screen).__name__ == "NodeScreen"

    asyncio.run(run())


def test_a_refusal_from_a_worker_or_a_timer_is_a_red_line(faulty_app):
    async def run() -> None:
        app = faulty_app()
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            await _settle(app, pilot)
            screen = app.screen
            screen.error = BadInput("the worker was refused")
            screen.fail_in_a_worker()
            await _settle(app, pilot)
            screen.error = BadInput("the timer was refused")
            screen.fail_in_a_timer()
            await until(
                pilot, lambda: "the timer was refused" in _notes(app), "the timer's line", 10
            )
            assert app.is_running and app.return_code is None
            notes = _notes(app)
            assert "the worker was refused" in notes and "the timer was refused" in notes

    asyncio.run(run())


@pytest.mark.guard_faults
def test_a_bug_is_logged_with_its_traceback_and_named_in_one_line(faulty_app, tmp_path):
    async def run() -> None:
        app = faulty_app()
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            await _settle(app, pilot)
            await pilot.press("f6")
            screen = app.screen
            screen.post_message(Raise(KeyError("no-such-column")))
            screen.error = RuntimeError("a worker fell over")
            screen.fail_in_a_worker()
            await _settle(app, pilot)
            assert app.is_running
            log = tmp_path / "state" / "llmgw" / ERROR_LOG_NAME
            assert [c.kind for c in app.guard.caught] == ["fault"] * 3
            line = _notes(app)[-3]
            assert line.startswith("ZeroDivisionError in fleet: division by zero in a test")
            assert f"traceback in {log}" in line and "\n" not in line
            text = log.read_text()
            assert "Traceback (most recent call last)" in text and "action_break_down" in text
            assert "KeyError" in text and "RuntimeError: a worker fell over" in text
            assert oct(log.stat().st_mode & 0o777) == "0o600"
            assert oct(log.parent.stat().st_mode & 0o777) == "0o700"

    asyncio.run(run())


def test_the_same_sentence_again_is_kept_but_not_shown_again(faulty_app):
    async def run() -> None:
        app = faulty_app()
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            await _settle(app, pilot)
            for _ in range(5):
                await pilot.press("f5")
            await pilot.pause()
            assert len(app.guard.caught) == 5
            assert _notes(app).count("fallbacks: 99 is not between 0 and 16") == 1

    asyncio.run(run())


def test_textuals_private_hooks_the_guard_stands_in_for_are_still_there():
    """If Textual renames these, the guard silently stops guarding: fail here instead."""
    assert callable(getattr(MessagePump, "_on_message", None))
    assert callable(getattr(App, "_handle_exception", None))
    assert LlmgwApp._handle_exception is not App._handle_exception
    assert issubclass(FleetScreen, Guarded) and issubclass(LlmgwApp, Guarded)
