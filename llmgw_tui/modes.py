"""The console's modes: each top-level screen built once, ahead of its key, and shown by it.

The first frame is the fleet's: every other screen's module (and the widgets
and core modules it needs) is imported the first time it is needed, or while
the console is idle once the fleet is shown (`ModesApp.prepare_screens`).
Which screen a mode holds is read through Textual's public
`get_screen_stack`; building one without showing it has no public API, and
goes through `llmgw_tui.textual_hooks` (`prepare_mode_screen`,
`forget_mode_screen`, `lay_out_hidden`, `lay_out_pending`), which names the
private members each uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from importlib import import_module
from typing import Any, TypeVar

from textual.app import App
from textual.screen import Screen

from llmgw_tui.kept_screen import KeptScreen
from llmgw_tui.textual_hooks import (
    forget_mode_screen,
    lay_out_hidden,
    lay_out_pending,
    prepare_mode_screen,
)

ReturnType = TypeVar("ReturnType")

SCREEN_MODULES = {
    "racks": ("llmgw_tui.screens.racks", "RacksScreen"),
    "plan": ("llmgw_tui.screens.plan", "PlanScreen"),
    "replicas": ("llmgw_tui.screens.replicas", "ReplicasScreen"),
    "serve": ("llmgw_tui.screens.serve", "ServeScreen"),
    "gateways": ("llmgw_tui.screens.gateways", "GatewaysScreen"),
}
"""The modes after the fleet, in the order they are prepared, and where each screen is."""
PREPARE_AFTER_S = 1.0
"""How long after the first snapshot is shown the other screens start being prepared."""
PREPARE_PAUSE_S = 0.3
"""The pause between two screens prepared (the console stays responsive meanwhile)."""
PREPARE_LAYOUTS = 3
"""A prepared screen is laid out again, at most this many times, while its widgets' first sizes settle."""
PREPARE_SETTLE_S = 0.02
"""The pause after each of those layouts for the widgets' size messages."""


def lazy_mode_screen(mode: str) -> Callable[[], Screen[Any]]:
    """A mode's screen factory (one of `SCREEN_MODULES`) that imports the screen's module when first called."""

    def build() -> Screen[Any]:
        module, name = SCREEN_MODULES[mode]
        screen: Screen[Any] = getattr(import_module(module), name)()
        return screen

    return build


def mode_screen(app: App[Any], mode: str) -> Screen[Any] | None:
    """The screen built for `mode` (shown before, or prepared); None when none is."""
    try:
        stack = app.get_screen_stack(mode)
    except KeyError:
        return None
    return stack[0] if stack else None


class ModesApp(App[ReturnType]):
    """The app's side of its modes: prepared while the console is idle, shown by their keys."""

    def __init__(self) -> None:
        super().__init__()
        self._showing_built_screen = False
        """Whether the switch under way shows a screen built before (no frames held)."""
        self._preparing: asyncio.Task[None] | None = None
        """The task preparing the screens, once started."""
        self._mounting: dict[str, asyncio.Event] = {}
        """The modes whose prepared screen is mounting now."""

    def start_preparing_screens(self) -> None:
        """Prepare the other screens in the background.

        A plain task, not a Textual worker: `workers.wait_for_complete()` (tests,
        and anything waiting for the console to settle) must not wait for it.
        """
        if self._preparing is None:
            self._preparing = asyncio.create_task(self._prepare_screens_or_say_why())

    def stop_preparing_screens(self) -> None:
        """Stop preparing (the app is closing)."""
        if self._preparing is not None:
            self._preparing.cancel()

    async def _prepare_screens_or_say_why(self) -> None:
        try:
            await self.prepare_screens()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a screen that cannot be built says so when its key is pressed
            self.log.error(f"Preparing the screens stopped: {error!r}")

    async def prepare_screens(self) -> None:
        """Build every other mode's screen while the console is idle, one at a time.

        Shown for the first time, a screen's key would wait for its module to be
        imported and its widgets to be built and laid out. Here each module is
        imported in a thread, off the UI loop, and each screen is built and laid
        out on the loop, a screen per turn with a pause between: its key then
        only shows it.
        """
        await asyncio.sleep(PREPARE_AFTER_S)
        first = mode_screen(self, self.DEFAULT_MODE)
        if isinstance(first, KeptScreen):
            await first.prepare()
            await asyncio.sleep(PREPARE_PAUSE_S)
        for mode, (module, _) in SCREEN_MODULES.items():
            await asyncio.to_thread(import_module, module)
            await self.prepare_mode(mode)
            await asyncio.sleep(PREPARE_PAUSE_S)

    async def prepare_mode(self, mode: str) -> None:
        """Build, mount and lay out a mode's screen without showing it (as `switch_mode` would)."""
        if mode_screen(self, mode) is not None or not self.is_running:
            return  # shown before, or prepared; or the app is closing its screens
        screen, mounted = prepare_mode_screen(self, mode)
        self._mounting[mode] = done = asyncio.Event()  # its key waits for the mount
        try:
            await mounted
        except BaseException:
            if self.is_running:
                forget_mode_screen(self, mode, screen)  # its key builds it again, saying why
            raise
        finally:
            done.set()
            del self._mounting[mode]
        # Lay it out as a shown screen's update timer would, until its widgets settle
        # (a hidden screen's layout requests wait for it to be shown).
        for _ in range(PREPARE_LAYOUTS):
            if screen.is_current or not self.is_running:
                break  # shown meanwhile (its own timer lays it out), or closing
            lay_out_hidden(screen, self.size)
            await asyncio.sleep(PREPARE_SETTLE_S)
            if not lay_out_pending(screen):
                break

    def delay_update(self, delay: float = 0.05) -> None:
        """Textual's `switch_mode` holds frames 50 ms to hide a screen being built; a built one is not."""
        if not self._showing_built_screen:
            super().delay_update(delay)

    async def show_mode(self, mode: str) -> None:
        """Show `mode`'s screen (once mounted, when it is being prepared), with nothing over it."""
        if self.current_mode != mode:
            mounting = self._mounting.get(mode)
            if mounting is not None:
                await mounting.wait()  # being prepared: shown once its widgets are in
            self._showing_built_screen = mode_screen(self, mode) is not None
            try:
                await self.switch_mode(mode)
            finally:
                self._showing_built_screen = False
        # A page pushed over the mode (a node page) is closed: the key names the screen.
        while len(self.screen_stack) > 1:
            await self.pop_screen()
