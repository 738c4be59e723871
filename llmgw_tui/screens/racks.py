"""NVLink racks: every domain drawn as a rack, and the hosts that are islands."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from llmgw_core.views.fleet import FleetSummary, RacksSummary
from llmgw_tui.kept_screen import KeptScreen
from llmgw_tui.widgets.footer import SteadyFooter
from llmgw_tui.widgets.header import TitleBar
from llmgw_tui.widgets.rack import RackWidget

ISLANDS_NAMED = 24
"""Islands named on the racks screen; the rest are counted (the fleet screen lists them all)."""


def islands_line(islands: tuple[str, ...] | list[str]) -> str:
    """The hosts in no NVLink domain: a few by name, then how many more.

    A fleet of many islands would otherwise wrap their every name into a
    screen of text each time the racks are laid out.
    """
    named = ", ".join(islands[:ISLANDS_NAMED]) or "none"
    more = len(islands) - ISLANDS_NAMED
    rest = f" and {more:,} more (the fleet screen lists every node)" if more > 0 else ""
    return f"Islands (no NVLink domain): {named}{rest}"


class RacksScreen(KeptScreen[None]):
    """Each NVLink domain as a rack with its trays' states; islands listed below."""

    BINDING_GROUP_TITLE = "Racks"

    def __init__(self) -> None:
        super().__init__()
        self._shown: RacksSummary | None = None

    def compose(self) -> ComposeResult:
        """Header, the racks (scrolling), the footer."""
        yield TitleBar(icon="▦")
        self._racks_body = VerticalScroll(id="racks-body")
        yield self._racks_body
        yield SteadyFooter()

    async def on_mount(self) -> None:
        """Draw the racks of the app's latest snapshot and follow updates."""
        self.title = "llmgw"
        self.sub_title = "NVLink racks"
        self.console_app.fleet_changed.subscribe(self, self.show_fleet)
        fleet = self.console_app.fleet
        if fleet is not None:
            await self.show_fleet(fleet)
        else:
            await self._racks_body.mount(Static("connecting to the fleet…"))

    async def show_fleet(self, fleet: FleetSummary) -> None:
        """Redraw only when a tray's state changed: racks do not flicker on every poll."""
        if fleet.racks == self._shown:
            return
        before, self._shown = self._shown, fleet.racks
        if self._redraw_in_place(before, fleet.racks):
            return
        body = self._racks_body
        await body.remove_children()
        animation = str(self.app.animation_level)
        widgets: list[Static | RackWidget] = [
            RackWidget(rack, animation=animation) for rack in fleet.racks.racks
        ]
        if not fleet.racks.racks:
            widgets.append(Static("No NVLink domain in this fleet.", classes="rack-title"))
        widgets.append(
            Static(
                islands_line(fleet.racks.islands),
                id="islands",
                classes="islands",
                markup=False,
            )
        )
        if fleet.racks.failed_rails:
            widgets.append(
                Static(
                    "Rails left out of NCCL_IB_HCA (their last fabric test failed): "
                    + "; ".join(fleet.racks.failed_rails),
                    id="failed-rails",
                    classes="islands",
                    markup=False,
                )
            )
        await body.mount_all(widgets)

    def _redraw_in_place(self, before: RacksSummary | None, now: RacksSummary) -> bool:
        """Redraw the racks already shown when only their trays changed; whether it could.

        Removing and mounting every rack for one tray that changed state would
        hold the screen while a big fleet's racks are built again.
        """
        if before is None or now.islands != before.islands:
            return False
        if now.failed_rails != before.failed_rails:
            return False
        shown = list(self.query(RackWidget))
        if not now.racks or [w.rack.domain for w in shown] != [r.domain for r in now.racks]:
            return False
        for widget, rack in zip(shown, now.racks, strict=True):
            if widget.rack != rack:
                widget.show(rack)
        return True
