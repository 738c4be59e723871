"""The `demo_facts` fixture, shared with the placement tests (`tests/support/demo_fleet_facts.py`)."""

from __future__ import annotations

import pytest
from demo_fleet_facts import DemoFacts, demo_fleet_facts


@pytest.fixture(scope="session")
def demo_facts(tmp_path_factory: pytest.TempPathFactory) -> DemoFacts:
    """Every demo node ready, and inventory entries with the demo's fabrics."""
    return demo_fleet_facts(tmp_path_factory)
