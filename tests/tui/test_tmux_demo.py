"""`llmgw-tui --demo` driven in a real terminal: the fleet, `?`, `:racks`, a node page,
`:serve` to a ready replica, its logs, `q`."""

from __future__ import annotations

import shutil

import pytest
from drive_demo_in_tmux import drive

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


@pytest.fixture(scope="module")
def captures() -> dict[str, str]:
    """One walk of the demo console for the module (it starts the demo fleet: seconds)."""
    return drive()


def test_the_demo_console_shows_the_fleet_help_racks_and_a_node_then_exits_cleanly(captures):
    assert "23 nodes · 23 ready" in captures["fleet"]
    assert "gb200-r1-t13" in captures["fleet"]
    assert "Keys of fleet" in captures["help"]
    assert "Insufficient Resources" in captures["racks"]
    assert "NV18" in captures["node"]
    assert "EXIT=0" in captures["exit"]


def test_the_demo_console_serves_a_model_from_the_wizard_then_shows_its_logs(captures):
    assert "$ " in captures["serve-confirm"] and "NCCL_DEBUG=INFO" in captures["serve-confirm"]
    assert "llama-3-1-8b-instruct" in captures["replicas"]
    assert "[r0 " in captures["logs"]
    assert "0 replicas" in captures["stopped"]
