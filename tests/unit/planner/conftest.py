"""Shapes read from the real configs in ../shared/fixtures/models (in place)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmgw_core.model.shape import ModelShape, shape_from_config


@pytest.fixture
def real_shape(models_dir: Path):
    """Read a fixture repository's config.json (and quantize_config.json) into a shape."""

    def read(repo_dir: str) -> ModelShape:
        folder = models_dir / repo_dir
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        extra = {}
        quantize = folder / "quantize_config.json"
        if quantize.exists():
            extra["quantize_config.json"] = json.loads(quantize.read_text(encoding="utf-8"))
        return shape_from_config(config, extra_files=extra)

    return read
