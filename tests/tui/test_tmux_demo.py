"""`llmgw-tui --demo` driven in a real terminal: the fleet, `?`, `:racks`, a node page, `q`."""

from __future__ import annotations

import shutil

import pytest
from drive_demo_in_tmux import drive

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def test_the_demo_console_shows_the_fleet_help_racks_and_a_node_then_exits_cleanly():
    captures = drive()
    assert "23 nodes · 23 ready" in captures["fleet"]
    assert "gb200-r1-t13" in captures["fleet"]
    assert "Keys of fleet" in captures["help"]
    assert "Insufficient Resources" in captures["racks"]
    assert "NV18" in captures["node"]
    assert "EXIT=0" in captures["exit"]
