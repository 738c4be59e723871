"""An NVLink domain drawn as a rack: the switch band on top, trays of GPU chips below.

Each tray is a line drawn in the theme's colour for its state (joined,
degraded, not joined). Motion — a light running down the backplane
(`full`), not-joined trays pulsing (`basic` and `full`) — follows the
animation level; at `none` the rack is a still picture (tests, screenshots).
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size
from textual.markup import escape
from textual.timer import Timer
from textual.widgets import Static

from llmgw_core.views.fleet import RackSummary, TraySummary
from llmgw_tui.theme import theme_style

CHIP = "▣"
TRAY_STATE_WORDS = {"joined": "joined", "degraded": "degraded", "not-joined": "NOT JOINED"}


TRAY_COLOURS = {"joined": "success", "degraded": "warning", "not-joined": "error"}
"""The theme colour of each tray state (chips and state word)."""


class TrayList(Static):
    """Every tray of a rack, one line each: the backplane, name, chips, state and reason.

    One widget for the 18 trays, not five per tray: styling thousands of
    widgets (28 racks) took the console seconds; a line of text takes nothing.
    Its text and its height at a width are kept until the light or pulse moves
    (a screen of 28 racks is laid out several times as it first appears).
    """

    def __init__(self, trays: tuple[TraySummary, ...]) -> None:
        super().__init__()
        self.trays = trays
        """The trays drawn, in order."""
        self.lit: int | None = None
        """The tray the backplane light is on (`full` animation), None when still."""
        self.dimmed = False
        """Not-joined trays drawn dim this beat (`basic` and `full`)."""
        self._text: tuple[tuple[object, ...], Text] | None = None
        self._heights: dict[tuple[object, ...], int] = {}
        self._widest = 0
        """The widest tray line of `_text`, in cells."""

    def pulsing(self) -> list[str]:
        """The trays drawn dim now."""
        return [t.node for t in self.trays if self.dimmed and t.state == "not-joined"]

    def _drawn_as(self) -> tuple[object, ...]:
        return (self.lit, self.dimmed, self.app.theme)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """One line a tray when every line fits `width` (no wrapping to measure), else measured."""
        self.render()
        if self._widest <= width:
            return max(len(self.trays), 1)
        key = (*self._drawn_as(), width)
        if key not in self._heights:
            self._heights[key] = super().get_content_height(container, viewport, width)
        return self._heights[key]

    def render(self) -> Text:
        """The trays as lines of text in theme colours (built again only when their look changed)."""
        drawn_as = self._drawn_as()
        if self._text is not None and self._text[0] == drawn_as:
            return self._text[1]
        text = self._lines()
        self._text = (drawn_as, text)
        self._widest = max((line.cell_len for line in text.split("\n")), default=0)
        return text

    def _lines(self) -> Text:
        text = Text()
        for index, tray in enumerate(self.trays):
            if index:
                text.append("\n")
            colour = theme_style(self.app, TRAY_COLOURS[tray.state])
            backplane = "accent" if index == self.lit else "primary"
            text.append("┃ ", style=theme_style(self.app, backplane))
            text.append(f"{tray.node:<14}")
            chips = f"{' '.join([CHIP] * max(tray.gpu_count, 1)):<9}"
            dim = self.dimmed and tray.state == "not-joined"
            text.append(chips, style=colour + Style(dim=True) if dim else colour)
            text.append(f"{TRAY_STATE_WORDS[tray.state]:<12}", style=colour + Style(bold=True))
            muted = colour if tray.state != "joined" else Style(dim=True)
            text.append(tray.reason or "", style=muted)
        return text


class RackWidget(Vertical):
    """One NVLink domain as a rack."""

    def __init__(self, rack: RackSummary, *, animation: str = "none") -> None:
        super().__init__(classes="rack")
        self.rack = rack
        """The domain drawn."""
        self.animation = animation
        """`none` (still), `basic` (pulsing trays) or `full` (and the backplane light)."""
        self._motion: list[Timer] = []

    def compose(self) -> ComposeResult:
        """Title, the NVLink Switch band, then the trays."""
        rack = self.rack
        imex = f"IMEX {rack.imex}" if rack.imex else "IMEX not seen"
        yield Static(
            f"NVLink domain [b]{escape(rack.domain)}[/b] · {rack.joined_gpus}/{rack.total_gpus} "
            f"GPUs in the domain · {len(rack.trays)} trays · {escape(imex)}",
            classes="rack-title",
        )
        yield Static("NVLink Switch", classes="switch-band")
        yield TrayList(rack.trays)

    def on_mount(self) -> None:
        """Start the motion the animation level allows."""
        if self.animation == "full":
            self._motion.append(self.set_interval(0.12, self._advance_light))
        if self.animation in ("basic", "full"):
            self._motion.append(self.set_interval(0.6, self._pulse))

    def _advance_light(self) -> None:
        trays = self.query_one(TrayList)
        if trays.trays:
            trays.lit = 0 if trays.lit is None else (trays.lit + 1) % len(trays.trays)
            trays.refresh()

    def _pulse(self) -> None:
        trays = self.query_one(TrayList)
        trays.dimmed = not trays.dimmed
        if any(t.state == "not-joined" for t in trays.trays):
            trays.refresh()
