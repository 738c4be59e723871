"""A local Hub for the model tests: huggingface_hub pointed at a real loopback server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hub_server import LocalHub, point_hub_at


@pytest.fixture
def local_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalHub]:
    """A running local Hub; HF_ENDPOINT points at it and the download cache is private to the test."""
    with LocalHub() as hub:
        point_hub_at(hub.endpoint, tmp_path, monkeypatch)
        yield hub
