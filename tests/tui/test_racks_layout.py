"""A rack is one line a tray when the lines fit, and wraps a tray's long reason when they do not."""

from __future__ import annotations

import asyncio

from llmgw_core.views.fleet import FleetSummary, RacksSummary, RackSummary, TraySummary
from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import StaticFeed
from llmgw_tui.widgets.rack import RackWidget

REASON = "IMEX daemon reports the tray outside the clique since the last fabric manager restart"


class Fixed(StaticFeed):
    def __init__(self, summary: FleetSummary) -> None:
        self.refresh_s = None
        self._summary = summary


def one_rack() -> FleetSummary:
    trays = tuple(
        TraySummary("gb200-t05", "not-joined", REASON, 4)
        if t == 5
        else TraySummary(f"gb200-t{t:02d}", "joined", None, 4)
        for t in range(1, 19)
    )
    rack = RackSummary("nvl72-r01", "uuid-1", "1", trays, "up")
    return FleetSummary(nodes=(), details={}, racks=RacksSummary((rack,), ()))


def racks_at(width: int) -> tuple[int, str]:
    async def run() -> tuple[int, str]:
        app = LlmgwApp(Fixed(one_rack()), animation="none")
        async with app.run_test(size=(width, 60)) as pilot:
            await pilot.pause()
            await pilot.press("2")
            await pilot.pause()
            rack = app.screen.query_one(RackWidget)
            lines = [
                "".join(segment.text for segment in strip)
                for strip in app.screen._compositor.render_full_update().strips
            ]
            return rack.size.height, "\n".join(lines)

    return asyncio.run(run())


def test_a_rack_on_a_wide_terminal_is_one_line_a_tray():
    height, screen = racks_at(160)
    assert height == 20  # title, switch band, 18 trays
    assert REASON in screen


def test_a_rack_on_a_narrow_terminal_wraps_the_long_reason_and_still_shows_all_of_it():
    height, screen = racks_at(70)
    assert height > 20
    words = " ".join(screen.replace("┃", " ").replace("│", " ").split())
    assert "fabric manager restart" in words
    assert "gb200-t18" in screen


def with_tray_5(state: str, reason: str | None) -> FleetSummary:
    fleet = one_rack()
    rack = fleet.racks.racks[0]
    trays = tuple(
        TraySummary(t.node, state, reason, 4) if t.node == "gb200-t05" else t for t in rack.trays
    )
    racks = RacksSummary((RackSummary(rack.domain, "uuid-1", "1", trays, "up"),), ())
    return FleetSummary(nodes=(), details={}, racks=racks)


def test_a_tray_that_joins_on_a_poll_is_redrawn_in_the_rack_already_shown():
    async def run() -> tuple[bool, str, str]:
        app = LlmgwApp(Fixed(one_rack()), animation="none")
        async with app.run_test(size=(160, 60)) as pilot:
            await pilot.pause()
            await pilot.press("2")
            await pilot.pause()
            rack = app.screen.query_one(RackWidget)
            before = rack.render().plain.splitlines()[2 + 4]
            joined = with_tray_5("joined", None)
            app.fleet = joined
            app.fleet_changed.publish(joined)
            await pilot.pause()
            (now,) = app.screen.query(RackWidget)
            return now is rack, before, now.render().plain.splitlines()[2 + 4]

    same_widget, before, after = asyncio.run(run())
    assert "NOT JOINED" in before and REASON in before
    assert same_widget
    assert "joined" in after and "NOT JOINED" not in after and REASON not in after
