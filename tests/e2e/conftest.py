"""Fixtures the end-to-end modules share (each module brings its own `inventory`)."""

from __future__ import annotations

import pytest
from kept_demo import run_json


@pytest.fixture
def stopped_after(inventory: str):
    """Stops the named services and gateways after the test, whatever happened in it (a failed
    test leaves no card held for the next one)."""
    names: list[str] = []
    yield names
    for name in names:
        run_json(
            inventory,
            f"steps: [{{stop: {{service: {name}, on_fail: continue}}}}, "
            f"{{stop: {{gateway: gw-{name}, on_fail: continue}}}}]",
        )
