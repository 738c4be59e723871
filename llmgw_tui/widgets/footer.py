"""A footer that rebuilds its keys only when the keys it shows changed.

Textual's footer removes and mounts every key widget whenever the screen's
bindings are refreshed: on every focus change, every screen switch and a
screen's first frame. Each rebuild styles a dozen widgets anew (about 0.1 s
a screen switch on a busy machine). The keys a screen shows rarely change, so
this footer compares what it would draw with what it drew and rebuilds only
on a difference.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer


def shown_keys(screen: Screen[Any]) -> tuple[tuple[object, ...], ...]:
    """What a footer draws for `screen`: each shown key's label, words, action and state."""
    label = screen.app.get_key_display
    return tuple(
        (binding.key, label(binding), binding.description, binding.action, enabled, tooltip)
        for _node, binding, enabled, tooltip in screen.active_bindings.values()
        if binding.show or binding.action == "command_palette"
    )


class SteadyFooter(Footer):
    """Textual's footer, rebuilt only when the keys it shows differ from those it drew."""

    def __init__(self) -> None:
        super().__init__()
        self._drawn_keys: tuple[tuple[object, ...], ...] | None = None

    def bindings_changed(self, screen: Screen[Any]) -> None:
        """Rebuild the keys when they changed; a focus change that changes none draws nothing."""
        if self.is_attached and screen is self.screen and screen.app.app_focus:
            keys = shown_keys(screen)
            if keys == self._drawn_keys:
                return
            self._drawn_keys = keys
        super().bindings_changed(screen)
