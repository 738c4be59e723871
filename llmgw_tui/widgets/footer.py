"""The console's footer: the screen's keys drawn as one line by one widget.

Textual's footer is a container of one widget per key: a dozen widgets
styled (each key three times as it mounts), laid out and drawn, and all of
them removed and mounted again whenever the screen's bindings are refreshed.
On the console's first frame that was a sixth of the work. This footer draws
the same line (the same keys, styles and order, the palette key on the right
behind its edge) as one piece of text, and draws it again only when the keys
it shows change. A key is still clicked (or, when disabled, rings the bell),
highlighted under the mouse, and the line scrolls with the wheel when the
keys are wider than the screen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget

SCROLL_STEP_COLUMNS = 4
"""Columns the keys move per turn of the mouse wheel when they are wider than the footer."""


@dataclass(frozen=True)
class FooterKey:
    """One key as the footer shows it."""

    key: str
    """The key pressed when it is clicked."""
    label: str
    """How the key is written (`⏎`, `/`, `^p`)."""
    description: str
    action: str
    enabled: bool
    tooltip: str


def shown_keys(screen: Screen[Any]) -> tuple[tuple[FooterKey, ...], FooterKey | None]:
    """The keys a footer shows for `screen` (one per action, in binding order), and the palette's."""
    app = screen.app

    def footer_key(binding: Binding, enabled: bool, tooltip: str) -> FooterKey:
        label = app.get_key_display(binding)
        return FooterKey(binding.key, label, binding.description, binding.action, enabled, tooltip)

    keys: dict[str, FooterKey] = {}
    for _node, binding, enabled, tooltip in screen.active_bindings.values():
        if binding.show and binding.action not in keys:
            keys[binding.action] = footer_key(binding, enabled, tooltip)
    palette: FooterKey | None = None
    if app.ENABLE_COMMAND_PALETTE:
        active = screen.active_bindings.get(app.COMMAND_PALETTE_BINDING)
        if active is not None:
            _node, binding, enabled, _tooltip = active
            palette = footer_key(binding, enabled, binding.tooltip or binding.description)
    return tuple(keys.values()), palette


class SteadyFooter(Widget, can_focus=False):
    """The screen's keys on the bottom line, drawn again only when they change."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "footer--key",
        "footer--description",
        "footer--hover",
        "footer--edge",
    }
    DEFAULT_CSS = """
    SteadyFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        text-wrap: nowrap;
        & > .footer--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        & > .footer--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        & > .footer--hover { background: $block-hover-background; }
        & > .footer--edge { color: $foreground 20%; }
    }
    """

    def __init__(self) -> None:
        super().__init__()
        self.keys: tuple[tuple[FooterKey, ...], FooterKey | None] | None = None
        """The keys drawn (the same object while they stay the same); None before the first draw."""
        self._scroll_columns = 0
        self._hover: FooterKey | None = None
        self._spans: list[tuple[int, int, FooterKey]] = []
        """Where each key was drawn: first column, column after, key."""

    def on_mount(self) -> None:
        """Follow the screen's bindings (focus changes, screen switches)."""
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        """Stop following the screen's bindings."""
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen[Any]) -> None:
        if self.is_attached and screen is self.screen:
            keys = shown_keys(screen)
            if keys != self.keys:
                self.keys = keys
                self.refresh()

    def render(self) -> Text:
        """The keys on the left (scrolled), the palette key on the right behind its edge."""
        if self.keys is None:
            self.keys = shown_keys(self.screen)
        keys, palette = self.keys
        key_style = self.get_component_rich_style("footer--key", partial=True)
        words_style = self.get_component_rich_style("footer--description", partial=True)
        right = Text()
        if palette is not None:
            right.append("▏", self.get_component_rich_style("footer--edge"))
            right.append_text(self._key_text(palette, key_style, words_style, compact=True))
            right.append(" ")
        width = self.size.width
        left_width = max(width - right.cell_len, 0)
        left = Text()
        spans: list[tuple[int, int, FooterKey]] = []
        for key in keys:
            start = left.cell_len - self._scroll_columns
            left.append_text(self._key_text(key, key_style, words_style, compact=False))
            spans.append((start, left.cell_len - self._scroll_columns, key))
        self._scroll_columns = max(0, min(self._scroll_columns, left.cell_len - left_width))
        left = left[self._scroll_columns :] if self._scroll_columns else left
        left.truncate(left_width, overflow="crop", pad=True)
        if palette is not None:
            spans.append((left_width, width, palette))
        self._spans = spans
        line = Text.assemble(left, right, no_wrap=True, end="")
        line.stylize_before(self.rich_style)
        return line

    def _key_text(
        self, key: FooterKey, key_style: Style, words_style: Style, *, compact: bool
    ) -> Text:
        """One key as Textual's footer draws it: ` K ` then `Words ` (compact: `K` then ` Words`)."""
        label = key.label if compact else f" {key.label} "
        if not key.description:
            text = Text(label, key_style)
        else:
            words = f" {key.description}" if compact else f"{key.description} "
            text = Text.assemble((label, key_style), (words, words_style))
        if not key.enabled:
            text.stylize_before(Style(dim=True))
        if key is self._hover and key.enabled:
            # The hover colour blended over the footer's background (it is mostly transparent).
            text.stylize_before(
                Style(bgcolor=self.get_component_rich_style("footer--hover").bgcolor)
            )
        return text

    def key_at(self, x: int) -> FooterKey | None:
        """The key drawn at column `x` of the footer, if any."""
        for start, end, key in self._spans:
            if start <= x < end:
                return key
        return None

    def on_mouse_down(self, event: events.MouseDown) -> None:
        """A click presses the key (a disabled one rings the bell)."""
        key = self.key_at(event.x)
        if key is None:
            return
        if key.enabled:
            self.app.simulate_key(key.key)
        else:
            self.app.bell()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        """Highlight the key under the mouse, and show its tooltip."""
        key = self.key_at(event.x)
        if key is not self._hover:
            self._hover = key
            self.tooltip = key.tooltip if key is not None and key.tooltip else None
            self.refresh()

    def on_leave(self, event: events.Leave) -> None:
        """No key is highlighted once the mouse leaves."""
        if self._hover is not None:
            self._hover = None
            self.tooltip = None
            self.refresh()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        """The wheel moves keys wider than the footer to the left."""
        self._scroll(SCROLL_STEP_COLUMNS, event)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        """The wheel moves them back."""
        self._scroll(-SCROLL_STEP_COLUMNS, event)

    def _scroll(self, columns: int, event: events.MouseEvent) -> None:
        before = self._scroll_columns
        self._scroll_columns = max(0, before + columns)  # render() clamps the far end
        if self._scroll_columns != before:
            event.stop()
            self.refresh()
