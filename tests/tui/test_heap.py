"""Once the fleet is drawn, the console's objects are left out of Python's full collections."""

from __future__ import annotations

import json
import subprocess
import sys

from llmgw_tui.heap import GC_THRESHOLDS

CONSOLE_UNTIL_DRAWN = """
import asyncio, gc, json
from llmgw_core.views.node import ClassCount, NodeSummary
from llmgw_core.views.fleet import FleetSummary, RacksSummary
from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import StaticFeed

class Fixed(StaticFeed):
    def __init__(self, summary):
        self.refresh_s = None
        self._summary = summary

nodes = tuple(
    NodeSummary(f"h100-{i:04d}", "ready", None, (ClassCount("h100-80g", 8, 8),), ("ib-a",), None, 0, False)
    for i in range(300)
)
seen = {"before": [gc.get_freeze_count(), list(gc.get_threshold())]}

async def main():
    app = LlmgwApp(Fixed(FleetSummary(nodes, {}, RacksSummary((), ()))), animation="none")
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.screen.query_one("#nodes")
        while table.row_count < len(nodes):
            await pilot.pause(0.01)
        for _ in range(1000):  # the freeze follows the first draw
            if gc.get_freeze_count():
                break
            await pilot.pause(0.01)
        seen["drawn"] = [gc.get_freeze_count(), list(gc.get_threshold()), table.row_count]

asyncio.run(main())
print(json.dumps(seen))
"""


def test_once_the_fleet_is_drawn_its_objects_are_frozen_and_full_collections_are_rare():
    done = subprocess.run(
        [sys.executable, "-c", CONSOLE_UNTIL_DRAWN],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    frozen_before, thresholds_before = seen["before"]
    frozen_after, thresholds_after, rows = seen["drawn"]
    assert frozen_before == 0 and thresholds_before != list(GC_THRESHOLDS)
    assert rows == 300
    assert frozen_after > 50_000, "the modules, widgets and rows alive once drawn are frozen"
    assert thresholds_after == list(GC_THRESHOLDS)
