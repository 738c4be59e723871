"""Where the console's fleet snapshots come from: the live fleet, or a fixed one for tests.

A feed hands the app one `FleetSummary` at a time; the app polls it from a
worker and never overlaps two polls. The live feed opens the fleet on its first
poll (SSH handshakes take seconds) so the first frame never waits for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from llmgw_core.views import FleetSummary, fleet_summary


class FleetFeed(Protocol):
    """A source of fleet snapshots."""

    refresh_s: float | None
    """Seconds between polls; None polls once (a fixed fleet)."""

    async def snapshot(self) -> FleetSummary:
        """The fleet as it is now."""
        ...

    async def doctor(self, node: str) -> list[dict[str, str]]:
        """The node's doctor checks: `check`, `status` (pass, warn, fail), `message`, `fix`."""
        ...

    async def refresh(self) -> None:
        """Re-read every node's facts now rather than at the next scheduled refresh."""
        ...

    async def close(self) -> None:
        """Release what the feed opened (SSH connections, the demo fleet)."""
        ...


class StaticFeed:
    """A fleet that never changes: tests and screenshots, built from real agent facts."""

    def __init__(
        self, fleet_state: Any, fabrics: Mapping[str, Iterable[str]] | None = None
    ) -> None:
        self.refresh_s: float | None = None
        self._summary = fleet_summary(fleet_state, fabrics)

    async def snapshot(self) -> FleetSummary:
        """The one fixed snapshot."""
        return self._summary

    async def refresh(self) -> None:
        """A fixed fleet has nothing to re-read."""

    async def doctor(self, node: str) -> list[dict[str, str]]:
        """The agent's own checks over the node's facts, run here (no node to ask)."""
        from llmgw_agent.doctor import run_checks
        from llmgw_core.errors import BadInput
        from llmgw_core.views import facts_mapping

        state = self._summary.fleet_state
        known = state.nodes.get(node) if state is not None else None
        if known is None or known.facts is None:
            raise BadInput(f"no facts for {node!r} to check", "pick a node of the fleet")
        return list(run_checks(dict(facts_mapping(known.facts))))

    async def close(self) -> None:
        """Nothing to release."""


class LiveFeed:
    """The fleet of an inventory, or the embedded demo fleet, over SSH."""

    def __init__(self, *, inventory: str | None, demo: bool, refresh_s: float = 2.0) -> None:
        self.refresh_s: float | None = refresh_s
        self._inventory = inventory
        self._demo = demo
        self._fleet: Any = None
        self._closer: Callable[[], Awaitable[None]] | None = None

    async def snapshot(self) -> FleetSummary:
        """Open the fleet on first use, then read its current state."""
        if self._fleet is None:
            from llmgw_core.fleet.session import open_fleet

            self._fleet, self._closer = await open_fleet(inventory=self._inventory, demo=self._demo)
        return fleet_summary(self._fleet.snapshot(), inventory_fabrics(self._fleet.inventory))

    async def refresh(self) -> None:
        """Ask every ready node for its facts again (the fleet never overlaps two refreshes)."""
        if self._fleet is not None:
            await self._fleet.refresh()

    async def doctor(self, node: str) -> list[dict[str, str]]:
        """Ask the node's agent to run its doctor (as the `doctor` step does)."""
        from llmgw_core.errors import BadInput
        from llmgw_core.script.steps.doctor import DOCTOR_TIMEOUT_S, _checks_of

        if self._fleet is None:
            raise BadInput("the fleet is still connecting", "try again in a moment")
        raw = await self._fleet.request(node, "doctor", timeout_s=DOCTOR_TIMEOUT_S)
        return _checks_of(raw)

    async def close(self) -> None:
        """Close every connection, and stop the demo fleet if this feed started it."""
        closer, self._closer, self._fleet = self._closer, None, None
        if closer is not None:
            await closer()


def inventory_fabrics(inventory: Any) -> dict[str, tuple[str, ...]]:
    """Each node's fabric names, as the operator's inventory gives them."""
    return {
        spec.name: tuple(fabric.name for fabric in spec.fabrics) for spec in inventory.node_specs()
    }
