"""An NVLink domain drawn as a rack: its title, the switch band, trays of GPU chips below.

A rack is one widget: title, band and trays are lines of text. A widget per
part made the racks screen a few hundred widgets at 28 racks, which Textual
styled and laid out several times as the screen first appeared. Each tray
is a line drawn in the theme's colour for its state (joined, degraded, not
joined). Motion — a light running down the backplane
(`full`), not-joined trays pulsing (`basic` and `full`) — follows the
animation level; at `none` the rack is a still picture (tests, screenshots).
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.geometry import Size
from textual.timer import Timer
from textual.widgets import Static

from llmgw_core.views.fleet import RackSummary, TraySummary
from llmgw_tui.theme import theme_style

CHIP = "▣"
TRAY_STATE_WORDS = {"joined": "joined", "degraded": "degraded", "not-joined": "NOT JOINED"}


SWITCH_BAND_CELLS = 34
"""The width of the NVLink Switch band, in cells."""
SWITCH_BAND_TINT = 0.4
"""How much of the theme's primary colour the band's background mixes into the background."""

TRAY_COLOURS = {"joined": "success", "degraded": "warning", "not-joined": "error"}
"""The theme colour of each tray state (chips and state word)."""


class RackWidget(Static):
    """One NVLink domain as a rack: title, switch band, then a line a tray.

    Its text and its height at a width are kept until the light or pulse moves
    (a screen of 28 racks is laid out several times as it first appears).
    """

    def __init__(self, rack: RackSummary, *, animation: str = "none") -> None:
        super().__init__(classes="rack")
        self.rack = rack
        """The domain drawn."""
        self.trays: tuple[TraySummary, ...] = rack.trays
        """The trays drawn, in order."""
        self.animation = animation
        """`none` (still), `basic` (pulsing trays) or `full` (and the backplane light)."""
        self.lit: int | None = None
        """The tray the backplane light is on (`full` animation), None when still."""
        self.dimmed = False
        """Not-joined trays drawn dim this beat (`basic` and `full`)."""
        self._motion: list[Timer] = []
        self._text: tuple[tuple[object, ...], Text] | None = None
        self._widest = 0
        """The widest line of `_text`, in cells."""
        self._heights: dict[tuple[object, ...], int] = {}

    def show(self, rack: RackSummary) -> None:
        """Draw the same domain's newer summary (its trays' states, its IMEX) in place."""
        self.rack = rack
        self.trays = rack.trays
        self.lit = None if self.lit is None or not rack.trays else self.lit % len(rack.trays)
        self._text = None
        self._heights.clear()
        self.refresh(layout=True)

    def pulsing(self) -> list[str]:
        """The trays drawn dim now."""
        return [t.node for t in self.trays if self.dimmed and t.state == "not-joined"]

    def on_mount(self) -> None:
        """Start the motion the animation level allows."""
        if self.animation == "full":
            self._motion.append(self.set_interval(0.12, self._advance_light))
        if self.animation in ("basic", "full"):
            self._motion.append(self.set_interval(0.6, self._pulse))

    def _advance_light(self) -> None:
        if self.trays:
            self.lit = 0 if self.lit is None else (self.lit + 1) % len(self.trays)
            self.refresh()

    def _pulse(self) -> None:
        self.dimmed = not self.dimmed
        if any(t.state == "not-joined" for t in self.trays):
            self.refresh()

    def _drawn_as(self) -> tuple[object, ...]:
        return (self.lit, self.dimmed, self.app.theme)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """A line a row when every line fits `width` (no wrapping to measure), else measured."""
        text = self.render()
        if self._widest <= width:
            return len(text.plain.split("\n"))
        key = (*self._drawn_as(), width)
        if key not in self._heights:
            self._heights[key] = super().get_content_height(container, viewport, width)
        return self._heights[key]

    def render(self) -> Text:
        """The rack as lines of text in theme colours (built again only when its look changed)."""
        drawn_as = self._drawn_as()
        if self._text is not None and self._text[0] == drawn_as:
            return self._text[1]
        text = Text("\n").join([self._title(), self._band(), self._tray_lines()])
        self._text = (drawn_as, text)
        self._widest = max((line.cell_len for line in text.split("\n")), default=0)
        return text

    def _title(self) -> Text:
        rack = self.rack
        imex = f"IMEX {rack.imex}" if rack.imex else "IMEX not seen"
        return Text.assemble(
            "NVLink domain ",
            (rack.domain, Style(bold=True)),
            f" · {rack.joined_gpus}/{rack.total_gpus} GPUs in the domain"
            f" · {len(rack.trays)} trays · {imex}",
            style=theme_style(self.app, "foreground"),
        )

    def _band(self) -> Text:
        variables = self.app.theme_variables
        tint = Color.parse(variables["background"]).blend(
            Color.parse(variables["primary"]), SWITCH_BAND_TINT
        )
        style = theme_style(self.app, "foreground", bold=True) + Style(bgcolor=tint.rich_color)
        return Text("NVLink Switch".center(SWITCH_BAND_CELLS), style=style)

    def _tray_lines(self) -> Text:
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
