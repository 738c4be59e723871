"""Hub surroundings for the resolution tests: a private cache, no token, an endpoint of the test's choosing."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from huggingface_hub import constants

from tests.unit.model.hub_server import LocalHub


@pytest.fixture
def hub_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Point huggingface_hub at an endpoint, online, with an empty private cache and no token."""

    def point(endpoint: str) -> None:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
        monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-tokens"))

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
    """A running local Hub (see tests/unit/model/hub_server.py) that huggingface_hub talks to."""
    with LocalHub() as hub:
        hub_at(hub.endpoint)
        yield hub
