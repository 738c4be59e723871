"""Shapes for the memory-rule tests: real configs read in place, and DeepSeek-V2-Lite from its facts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from llmgw_core.model.shape import ModelShape, shape_from_config


@pytest.fixture
def model_shape(models_dir: Path) -> Callable[[str], ModelShape]:
    """Read a fixture directory's config.json into a shape."""

    def read(name: str) -> ModelShape:
        return shape_from_config(json.loads((models_dir / name / "config.json").read_text()))

    return read
