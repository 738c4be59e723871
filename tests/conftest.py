"""Test-wide helpers: where the shared third-party fixtures live.

The fixtures under `../shared/fixtures` are third-party data: tests read them
in place and skip, saying why, where they are absent. They are never copied
into this repository.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("LLMGW_SHARED", REPO_ROOT.parent / "shared"))
HARDWARE = SHARED / "fixtures" / "hardware"
MODELS = SHARED / "fixtures" / "models"


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with a message when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared fixtures are not beside this checkout")
    return path


@pytest.fixture
def hardware_dir() -> Path:
    """The captured hardware outputs (skips where ../shared is absent)."""
    return shared_path("fixtures", "hardware")


@pytest.fixture
def models_dir() -> Path:
    """The real model metadata (skips where ../shared is absent)."""
    return shared_path("fixtures", "models")
