"""Opening the live fleet for a face (the console, the headless runner).

`open_fleet` is the one way in: it reads the inventory (or starts the demo
fleet), connects every node and waits until each has answered or failed
once, then hands back the fleet and the coroutine that closes it all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from llmgw_agent.ops import Op
from llmgw_core.errors import LlmgwError
from llmgw_core.fleet.client import AgentLost
from llmgw_core.fleet.fleet import Fleet
from llmgw_core.fleet.ssh import SshConnector, SshSettings
from llmgw_core.inventory import Inventory, load_inventory

if TYPE_CHECKING:
    from llmgw_core.fleet.sim.demo import DemoFleet

SETTLE_TIMEOUT_S = 120.0
SHARD_STOP_TIMEOUT_S = 10.0

Closer = Callable[[], Awaitable[None]]


async def open_fleet(
    *,
    inventory: str | None,
    demo: bool,
    settle_timeout_s: float = SETTLE_TIMEOUT_S,
    wait_for_agents_on_close: bool = True,
) -> tuple[Fleet, Closer]:
    """Connect the fleet of `inventory` (None: the default file) or of the demo.

    Returns once every node is ready, unreachable or refused (or after
    `settle_timeout_s`; the rest keep connecting in the background).
    `wait_for_agents_on_close=False`: closing ends every agent's input and
    connection without waiting for each to exit (see `Fleet.close`).

    Raises:
        BadInput: the inventory is missing or wrong (before any connection).
    """
    demo_fleet: DemoFleet | None = None
    if demo:
        from llmgw_core.fleet.sim.demo import (
            start_demo_fleet,  # its in-process sshd: the demo's only
        )

        demo_fleet = await start_demo_fleet()
        settings = demo_fleet.settings
        described = demo_fleet.inventory
    else:
        described = load_inventory(inventory)
        settings = ssh_settings(described)
    fleet = Fleet(described, SshConnector(settings))

    async def close() -> None:
        try:
            if demo_fleet is not None:
                await stop_every_shard(fleet)
            await fleet.close(wait_for_agents=wait_for_agents_on_close)
        finally:
            if demo_fleet is not None:
                await demo_fleet.stop()

    try:
        await fleet.start()
        if described.clusters:
            from llmgw_core.fleet.slurm_jobs import join_running_jobs

            await join_running_jobs(fleet)  # the replicas already running as Slurm jobs
        with contextlib.suppress(TimeoutError):
            await fleet.wait_settled(settle_timeout_s)
    except BaseException:
        await close()
        raise
    return fleet, close


def ssh_settings(inventory: Inventory) -> SshSettings:
    """The SSH settings an inventory asks for: its known_hosts and its `ssh:` limits."""
    limits = inventory.ssh
    return SshSettings(
        known_hosts=inventory.known_hosts_path(),
        connect_timeout_s=limits.connect_timeout_s,
        max_handshakes=limits.max_handshakes,
        max_handshakes_per_server=limits.max_startups,
        max_handshakes_per_bastion=limits.max_startups_per_bastion,
        banner_grace_s=limits.banner_grace_s,
        banner_timeout_s=limits.banner_timeout_s,
    )


async def stop_every_shard(fleet: Fleet) -> None:
    """Stop every shard the ready nodes run (the demo leaves nothing behind)."""

    async def stop_node(name: str) -> None:
        try:
            listing = await fleet.request(name, Op.SHARD_LIST, timeout_s=SHARD_STOP_TIMEOUT_S)
        except (LlmgwError, AgentLost):
            return
        shards = listing.get("shards", []) if isinstance(listing, dict) else []
        for shard in shards:
            shard_id = shard.get("shard_id") if isinstance(shard, dict) else None
            if isinstance(shard_id, str):
                with contextlib.suppress(LlmgwError):
                    await fleet.request(
                        name,
                        Op.SHARD_STOP,
                        {"shard_id": shard_id, "timeout_s": SHARD_STOP_TIMEOUT_S},
                        timeout_s=SHARD_STOP_TIMEOUT_S + 5,
                    )

    ready = [node.name for node in fleet.snapshot().ready()]
    await asyncio.gather(*(stop_node(name) for name in ready))
