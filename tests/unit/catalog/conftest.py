"""Hub surroundings for the resolution tests: a private cache, no token, an endpoint of the test's choosing."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hub_server import LocalHub, point_hub_at


@pytest.fixture
def hub_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Point huggingface_hub at an endpoint, online, with an empty private cache and no token."""

    def point(endpoint: str) -> None:
        point_hub_at(endpoint, tmp_path, monkeypatch)

    return point


@pytest.fixture
def refusing_endpoint() -> str:
    """An address on loopback where nothing listens: every connection is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def local_hub(hub_at: Callable[[str], None]) -> Iterator[LocalHub]:
    """A running local Hub (see tests/support/hub_server.py) that huggingface_hub talks to."""
    with LocalHub() as hub:
        hub_at(hub.endpoint)
        yield hub
