"""An NVLink domain drawn as a rack: the switch band on top, trays of GPU chips below.

Each tray is a row whose state is a CSS class (`-joined`, `-degraded`,
`-not-joined`), so the theme decides the colours. Motion — a light running
down the backplane (`full`), not-joined trays pulsing (`basic` and `full`) —
follows the animation level; at `none` the rack is a still picture (tests,
screenshots).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.timer import Timer
from textual.widgets import Static

from llmgw_core.views.fleet import RackSummary, TraySummary

CHIP = "▣"
TRAY_STATE_WORDS = {"joined": "joined", "degraded": "degraded", "not-joined": "NOT JOINED"}


class TrayRow(Horizontal):
    """One tray: its name, its GPU chips, its state and what keeps it out.

    The row's left border is the backplane; `-lit` marks where the light is.
    """

    DEFAULT_CSS = """
    TrayRow { height: auto; }
    """

    def __init__(self, tray: TraySummary) -> None:
        super().__init__(classes=f"-{tray.state}")
        self.tray = tray
        """The tray drawn."""

    def compose(self) -> ComposeResult:
        """The row's cells, left to right."""
        tray = self.tray
        yield Static(tray.node, classes="tray-name", markup=False)
        yield Static(" ".join([CHIP] * max(tray.gpu_count, 1)), classes="chips")
        yield Static(TRAY_STATE_WORDS[tray.state], classes="tray-state")
        yield Static(tray.reason or "", classes="tray-reason", markup=False)


class RackWidget(Vertical):
    """One NVLink domain as a rack."""

    DEFAULT_CSS = """
    RackWidget { height: auto; }
    """

    def __init__(self, rack: RackSummary, *, animation: str = "none") -> None:
        super().__init__(classes="rack")
        self.rack = rack
        """The domain drawn."""
        self.animation = animation
        """`none` (still), `basic` (pulsing trays) or `full` (and the backplane light)."""
        self._light = 0
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
        for tray in rack.trays:
            yield TrayRow(tray)

    def on_mount(self) -> None:
        """Start the motion the animation level allows."""
        if self.animation == "full":
            self._motion.append(self.set_interval(0.12, self._advance_light))
        if self.animation in ("basic", "full"):
            self._motion.append(self.set_interval(0.6, self._pulse))

    def _advance_light(self) -> None:
        taps = list(self.query(TrayRow))
        if not taps:
            return
        taps[self._light % len(taps)].remove_class("-lit")
        self._light = (self._light + 1) % len(taps)
        taps[self._light].add_class("-lit")

    def _pulse(self) -> None:
        for row in self.query("TrayRow.-not-joined"):
            row.toggle_class("-pulse")
