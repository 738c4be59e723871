"""The monkey's seeds 10–19 (see `test_monkey.py`), in a file of their own for another worker."""

from __future__ import annotations

import pytest
from test_monkey import SEEDS, _quick_pilot, batches, run_batch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

__all__ = ["_quick_pilot"]  # the fixture, used here as in test_monkey.py


@pytest.mark.parametrize(
    "seeds", batches(SEEDS // 2, SEEDS - 1), ids=lambda seeds: f"seeds-{seeds[0]}-{seeds[-1]}"
)
def test_the_demo_console_survives_more_random_keys_text_and_pastes(seeds: list[int]):
    run_batch(seeds)
