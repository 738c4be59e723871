"""A service's lease: one operator at a time changes a service, and a dead one does not block it.

The lease is kept by the agent of the inventory's first node (`lease_node`),
in its state folder, and taken, renewed and released over SSH like any
request. While `apply` (or later a keeper) works it renews the lease every
`ttl_s / 3`; a holder that dies stops renewing and its lease lapses after
`ttl_s` — sooner, in fact: the agent gives back the leases taken on a
connection when the connection ends. A second operator is refused with a
sentence naming who holds the service and since when.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

from llmgw_agent.ops import Op
from llmgw_core.cancelling import cancel_and_wait
from llmgw_core.errors import LlmgwError
from llmgw_core.fleet.client import AgentError, AgentLost

LEASE_TTL_S = 30.0
"""How long a lease lives unrenewed (its holder renews it every third of that)."""
REQUEST_TIMEOUT_S = 15.0


class ServiceHeld(LlmgwError):
    """Another operator holds the service's lease (the sentence names them and since when)."""


class LeaseLost(LlmgwError):
    """Our lease lapsed or was taken while we worked: we stop before the next change."""


def holder_name() -> str:
    """Who takes a lease, as the other operators will read it: `user@host (pid N)`."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()} (pid {os.getpid()})"


def lease_node(fleet: Any) -> str:
    """The node whose agent keeps the leases: the inventory's first, the same for everyone."""
    return str(fleet.inventory.node_specs()[0].name)


class Held:
    """A lease we hold, renewed in the background until `release`."""

    def __init__(self, fleet: Any, node: str, name: str, token: str, ttl_s: float) -> None:
        self._fleet, self.node, self.name = fleet, node, name
        self._token, self._ttl_s = token, ttl_s
        self.lost: str | None = None
        self._renewer = asyncio.create_task(self._renew())

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self._ttl_s / 3)
            try:
                await self._fleet.request(
                    self.node,
                    Op.LEASE_RENEW,
                    {"name": self.name, "token": self._token, "ttl_s": self._ttl_s},
                    timeout_s=REQUEST_TIMEOUT_S,
                )
            except AgentError as exc:
                if exc.code == "lost":
                    self.lost = exc.said
                    return
            except (LlmgwError, AgentLost):
                continue  # the node may answer the next time; the lease lapses if it never does

    def check(self) -> None:
        """Raise `LeaseLost` when the lease is no longer ours (checked before each change)."""
        if self.lost is not None:
            raise LeaseLost(f"{self.lost}; stopped before the next change")

    async def release(self) -> None:
        await cancel_and_wait(self._renewer)
        with contextlib.suppress(LlmgwError, AgentLost):
            await self._fleet.request(
                self.node,
                Op.LEASE_RELEASE,
                {"name": self.name, "token": self._token},
                timeout_s=REQUEST_TIMEOUT_S,
            )


@contextlib.asynccontextmanager
async def service_lease(
    fleet: Any, name: str, *, holder: str | None = None, ttl_s: float = LEASE_TTL_S
) -> AsyncIterator[Held]:
    """Hold the lease of service `name` for the block.

    Raises:
        ServiceHeld: another holds it (the sentence names who, and since when).
        LlmgwError: the node that keeps the leases does not answer.
    """
    node = lease_node(fleet)
    state = fleet.snapshot().nodes.get(node)
    if state is None or state.state != "ready":
        raise LlmgwError(
            f"the leases of services are kept by {node} (the inventory's first node), which does "
            f"not answer: service {name} cannot be changed until it does"
        )
    try:
        taken = await fleet.request(
            node,
            Op.LEASE_TAKE,
            {"name": name, "holder": holder or holder_name(), "ttl_s": ttl_s},
            timeout_s=REQUEST_TIMEOUT_S,
        )
    except AgentError as exc:
        if exc.code == "held":
            raise ServiceHeld(exc.said, "wait for it, or try again once its lease lapses") from None
        raise
    held = Held(fleet, node, name, str(taken["token"]), ttl_s)
    try:
        yield held
    finally:
        await held.release()
