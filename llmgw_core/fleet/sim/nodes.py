"""A simulated node, as the demo fleet and the big simulated fleet both describe one, and what
its capture directory holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SimNode:
    """One simulated node: its name, hardware profile, fabric, and whether it is silent.

    Attributes:
        name: the node's name (its host name in the captures).
        profile: the hardware profile written for it (`llmgw_agent.sim.profiles`).
        options: the profile's options (`degraded_rail`, `hostname` …).
        fabric: the InfiniBand/RoCE fabric the inventory puts it on.
        labels: the inventory's labels (`rack`).
        silent: its SSH server accepts and then says nothing (a hung node).
    """

    name: str
    profile: str
    options: dict[str, Any] = field(default_factory=dict)
    fabric: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    silent: bool = False


def capture_adapters(capture: Path) -> list[str]:
    """The adapters a capture directory holds (what the agent will report)."""
    folder = capture / "sys" / "class" / "infiniband"
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []
