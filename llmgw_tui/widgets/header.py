"""The console's title line, drawn by one widget.

Textual's header is four widgets (the header, its icon, its title and the
clock's space), each styled and laid out before the first frame. This one
draws the same line: the icon, the screen's title and sub-title centred
between the icon's and the clock's columns. Clicking the icon opens the
command palette, clicking elsewhere makes the header taller, as Textual's does.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual import events
from textual.content import Content, Span
from textual.style import Style
from textual.widget import Widget

ICON_COLUMNS = 8
"""Columns of the icon's place (Textual's header: width 8, one column of padding)."""
CLOCK_COLUMNS = 10
"""Columns kept free on the right, where Textual's header puts its clock."""
ICON_TOOLTIP = "Open the command palette"


class TitleBar(Widget, can_focus=False):
    """Icon, `title — sub-title` centred, on the top line of a screen."""

    DEFAULT_CSS = """
    TitleBar {
        dock: top;
        width: 100%;
        height: 1;
        background: $panel;
        color: $foreground;
        text-wrap: nowrap;
        content-align-vertical: middle;
        &.-tall { height: 3; }
    }
    """

    def __init__(self, icon: str) -> None:
        super().__init__()
        self.icon = icon
        """The character at the top left."""

    def on_mount(self) -> None:
        """Draw again when the app's or the screen's title or sub-title changes."""
        for target in (self.app, self.screen):
            self.watch(target, "title", self._title_changed, init=False)
            self.watch(target, "sub_title", self._title_changed, init=False)

    def _title_changed(self) -> None:
        self.refresh()

    def render(self) -> Content:
        """` ▦`, the title centred between the icon's and the clock's columns, the clock's space."""
        screen = self.screen
        title = screen.title if screen.title is not None else self.app.title
        sub_title = screen.sub_title if screen.sub_title is not None else self.app.sub_title
        middle = max(self.size.width - ICON_COLUMNS - CLOCK_COLUMNS, 0)
        words = self.app.format_title(title, sub_title)
        if words.cell_length > middle:
            words = words.truncate(middle, ellipsis=True)
        # The icon and the words are pieces of their own, apart from the spaces around them
        # (as in Textual's header, where each is a widget): a Span with no style marks them.
        words = words.add_spans([Span(0, len(words.plain), Style())])
        left = (middle - words.cell_length) // 2
        words = words.pad_left(left).pad_right(middle - words.cell_length - left)
        icon = Content(f" {self.icon}", [Span(1, 1 + len(self.icon), Style())])
        icon = icon.pad_right(max(ICON_COLUMNS - 1 - cell_len(self.icon), 0))
        return Content.assemble(icon, words, Content(" " * CLOCK_COLUMNS))

    async def on_click(self, event: events.Click) -> None:
        """The icon opens the command palette; anywhere else makes the header taller or not."""
        event.stop()
        if event.x < ICON_COLUMNS and self.app.ENABLE_COMMAND_PALETTE:
            await self.run_action("app.command_palette")
        else:
            self.toggle_class("-tall")

    def on_mouse_move(self, event: events.MouseMove) -> None:
        """Over the icon, say what a click does."""
        on_icon = event.x < ICON_COLUMNS and self.app.ENABLE_COMMAND_PALETTE
        self.tooltip = ICON_TOOLTIP if on_icon else None
