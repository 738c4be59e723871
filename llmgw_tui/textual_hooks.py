"""Every use of Textual's private members (but `SteadyTable`'s cell cache), each beside the
public API it stands in for.

Textual is pinned (see pyproject.toml); `tests/tui/test_textual_hooks.py`
fails when a member used here moves, and when a module other than this one
and `widgets/table.py` reaches a private member of Textual's.

- **A handler raised** (no public hook): `MessagePump._on_message` is
  wrapped on the app and every screen (`Guarded`), and
  `App._handle_exception` overridden on the app (`GuardedApp`), so what a
  handler, timer or worker raises goes to the console's guard
  (`llmgw_tui.guard`) instead of ending the app.
- **A mode's screen built before it is shown** (public: `switch_mode`, which
  builds, mounts and shows at once): `prepare_mode_screen` builds the screen
  from the app's public `MODES` and mounts it with `_get_screen` and
  `_load_screen_css`, then installs it in the app's `_screen_stacks` as
  `switch_mode` would; `lay_out_hidden` lays it out as a shown screen's
  update timer would (`_layout_required`, `_dirty_widgets`,
  `_refresh_layout`), and `lay_out_pending` reads `_layout_required`.
- **A prepared screen that failed to mount, forgotten** (public:
  `remove_mode`, which forgets the mode itself too): `forget_mode_screen`
  reads the stack through the public `get_screen_stack` and deletes it from
  `_screen_stacks`.
- **A screen's styles current as it mounts** (public: none; Textual marks a
  new screen's styles stale, which restyles the whole app when it is shown):
  `mark_styles_current` (`_css_update_count`).

Which screen a mode holds (read through the public `get_screen_stack`), and
when each is prepared and shown, is `llmgw_tui.modes`'s: it reaches Textual's
privates only through the functions here.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, cast

from llmgw_tui.guard import guard_of, where_of

if TYPE_CHECKING:
    from textual.app import App
    from textual.geometry import Size
    from textual.message import Message
    from textual.screen import Screen

    from llmgw_tui.contract import ConsoleApp


class Guarded:
    """A mixin for the app and each screen: an exception from any of its handlers is caught.

    Stands in for a public per-handler error hook: `_on_message` is Textual's
    dispatcher of every message to its handlers.
    """

    app: App[Any]

    @property
    def console_app(self) -> ConsoleApp:
        """The app, typed: what every screen may reach of it (`ConsoleApp`, which the app keeps)."""
        return cast("ConsoleApp", self.app)

    async def _on_message(self, message: Message) -> None:
        try:
            await super()._on_message(message)  # type: ignore[misc]
        except Exception as error:
            guard = guard_of(self.app)
            if guard is None:
                raise
            guard.catch(error, where_of(self))


class GuardedApp(Guarded):
    """The app's side: what timers, workers and widgets raise is caught too.

    Stands in for a public "an exception escaped" hook: Textual's own
    `_handle_exception` exits the app. Before the first screen is up there is
    nothing to go on with, and Textual's runs.
    """

    def _handle_exception(self, error: Exception) -> None:
        from textual.worker import WorkerFailed

        app = cast("App[Any]", self)
        guard = guard_of(app)
        if guard is None or not app.is_running or not app.screen_stack:
            super()._handle_exception(error)  # type: ignore[misc]
            return
        cause = error.error if isinstance(error, WorkerFailed) else error
        guard.catch(cause, where_of(app.screen))


def prepare_mode_screen(app: App[Any], mode: str) -> tuple[Screen[Any], Awaitable[Any]]:
    """Build `mode`'s screen and install it as `switch_mode` would, without showing it.

    Returns the screen and what its mounting is awaited with.
    """
    # `switch_mode` builds from Textual's copy of the public `MODES`; the console adds no mode.
    declared = app.MODES[mode]
    screen, mounted = app._get_screen(declared() if callable(declared) else declared)
    app._load_screen_css(screen)
    app._screen_stacks[mode] = [screen]
    return screen, mounted


def forget_mode_screen(app: App[Any], mode: str, screen: Screen[Any]) -> None:
    """Drop a prepared screen that failed to mount: `mode`'s key builds it again."""
    try:
        stack = app.get_screen_stack(mode)
    except KeyError:
        return  # forgotten already (the app closing its screens)
    if stack == [screen] and not screen.is_current:
        del app._screen_stacks[mode]


def lay_out_hidden(screen: Screen[Any], size: Size) -> None:
    """Lay a screen out as its update timer would if it were shown."""
    screen._layout_required = False
    screen._dirty_widgets.clear()
    screen._refresh_layout(size)


def lay_out_pending(screen: Screen[Any]) -> bool:
    """Whether a screen asked to be laid out again since (a hidden one's requests wait)."""
    return bool(screen._layout_required)


def mark_styles_current(screen: Screen[Any], app: App[Any]) -> None:
    """Say a new screen's styles are those of the app's current stylesheet.

    Textual marks a new screen's styles stale, so the switch that shows it
    parses every stylesheet again and restyles the whole app. Its widgets are
    styled as they mount, with the stylesheet of the moment; a theme changed
    later bumps the app's count and restyles as it should.
    """
    screen._css_update_count = app._css_update_count
