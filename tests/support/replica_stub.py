"""A stand-in for a replica view with only what the gateway's worker rules read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Replica:
    """What `wanted_workers` reads of a replica view."""

    name: str
    phase: str
    spec: dict[str, Any] = field(default_factory=dict)
    draining: bool = False
    adapters: tuple[dict[str, Any], ...] = ()
