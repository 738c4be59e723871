"""What the console knows of the fleet at one moment: immutable snapshots.

The fleet replaces its snapshot whole on every change; the planner, the
placement and the screens take one and never see it move under them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from llmgw_core.facts import NodeFacts

NodeStatus = Literal["connecting", "ready", "unreachable", "refused"]


class NodeState(BaseModel):
    """One node as last seen.

    Attributes:
        state: `connecting` (not yet known), `ready` (its agent answers),
            `unreachable` (network, sshd or agent down; retried with backoff) or
            `refused` (we will not use it as configured: host key, Python,
            facts or fabrics contradict what we were told; `reason` says why).
        reason: one sentence when not ready (or a warning when ready), else None.
        last_seen: when its agent last answered.
        last_seen_monotonic: the same moment on this process's monotonic clock
            (how long a node has been silent is measured on it: a stepped wall
            clock must not fail a replica).
        facts: the agent's facts, validated; kept across an outage so a
            lost node still shows what it had.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    address: str = ""
    state: NodeStatus = "connecting"
    reason: str | None = None
    last_seen: datetime | None = None
    last_seen_monotonic: float | None = None
    facts: NodeFacts | None = None
    agent_version: str | None = None
    python_version: str | None = None


class FleetState(BaseModel):
    """Every node at one moment, in inventory order."""

    model_config = ConfigDict(frozen=True)

    taken_at: datetime
    nodes: dict[str, NodeState] = Field(default_factory=dict)

    def ready(self) -> list[NodeState]:
        """The nodes whose agent answers, in inventory order."""
        return [node for node in self.nodes.values() if node.state == "ready"]

    def settled(self) -> bool:
        """True once no node is still connecting for the first time."""
        return all(node.state != "connecting" for node in self.nodes.values())

    def counts(self) -> dict[str, int]:
        """How many nodes are in each state."""
        counts: dict[str, int] = {}
        for node in self.nodes.values():
            counts[node.state] = counts.get(node.state, 0) + 1
        return counts
