"""A small demo fleet for the fault matrix: three HGX H100 nodes, consoles on it, steps.

The nodes are the demo's (asyncssh servers on loopback, the real agent
behind each, the sim engine in replay mode). Three nodes, not the demo's
twenty-four, so a fault and its recovery take seconds: a two-node replica
on the first two can be placed again on the third when one is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from serve_demo_harness import FleetContext, LoopThread, open_console, step

from llmgw_core.fleet.fleet import Fleet
from llmgw_core.fleet.loopback import LoopbackSshd
from llmgw_core.fleet.sim.demo import DemoFleet, start_demo_fleet
from llmgw_core.fleet.sim.nodes import SimNode
from llmgw_core.script.registry import StepOutcome

LLAMA = "catalog:meta-llama/Llama-3.3-70B-Instruct"
NODES = ("h100-a-01", "h100-a-02", "h100-a-03")
SIM_LOAD_S = "0.3"
"""How long the sim engine 'loads' here: short, so a hundred races take seconds each."""


def bench_nodes() -> list[SimNode]:
    """Three H100 nodes on one fabric (enough to place a lost node's replica elsewhere)."""
    return [SimNode(name, "hgx-h100", fabric="ib-a", labels={"rack": "r01"}) for name in NODES]


class Bench:
    """The demo fleet of the matrix, the consoles opened on it, and a way to run steps."""

    def __init__(
        self,
        root: Path,
        *,
        node_env: dict[str, dict[str, str]] | None = None,
        nodes: list[SimNode] | None = None,
    ) -> None:
        self.root = root
        self.loop = LoopThread()
        self.demo: DemoFleet = self.loop.run(self._start(node_env or {}, nodes or bench_nodes()))
        self.consoles: list[tuple[Fleet, FleetContext]] = []

    async def _start(self, node_env: dict[str, dict[str, str]], nodes: list[SimNode]) -> DemoFleet:
        root = self.root / "demo"
        root.mkdir(parents=True, exist_ok=True)
        demo = await start_demo_fleet(root, nodes)
        for name, server in demo.servers.items():
            server.env["LLMGW_SIM_LOAD_S"] = SIM_LOAD_S
            server.env.update(node_env.get(name, {}))
        return demo

    # --- consoles -------------------------------------------------------------------------

    def console(self) -> FleetContext:
        """A new console on the fleet (its own SSH connections, its own agents' channels)."""
        fleet = self.loop.run(open_console(self.demo, retry_max_s=0.5))
        ctx = FleetContext(fleet, self.root)
        self.consoles.append((fleet, ctx))
        return ctx

    def close_console(self, ctx: FleetContext) -> None:
        """Close one console (its shards keep running: they are detached)."""
        fleet = next(f for f, c in self.consoles if c is ctx)
        self.consoles = [(f, c) for f, c in self.consoles if c is not ctx]
        self.loop.run(ctx.close())
        self.loop.run(fleet.close())

    def step(self, ctx: FleetContext, step_name: str, /, **args: Any) -> StepOutcome:
        """Run one step as the runner does."""
        return self.loop.run(step(ctx, step_name, **args), 300)

    def run(self, coro: Any, timeout_s: float = 300.0) -> Any:
        """Run a coroutine on the fleet's loop."""
        return self.loop.run(coro, timeout_s)

    # --- nodes ----------------------------------------------------------------------------

    def server(self, node: str) -> LoopbackSshd:
        """The SSH server standing in for `node`."""
        return self.demo.servers[node]

    def state_dir(self, node: str) -> Path:
        """Where `node`'s agent keeps its claims and shards."""
        return Path(self.server(node).env["LLMGW_AGENT_STATE"])

    def wait_state(self, ctx: FleetContext, node: str, state: str, timeout_s: float = 60) -> None:
        """Wait until `ctx`'s fleet sees `node` in `state` (reconnecting at once)."""

        async def wait() -> None:
            fleet = await ctx.live_fleet()
            fleet.reconnect_now(node)
            await fleet.wait_for(lambda snap: snap.nodes[node].state == state, timeout_s)

        self.run(wait(), timeout_s + 10)

    def wait_until(
        self, ctx: FleetContext, check: Callable[[Fleet], Any], timeout_s: float = 30
    ) -> Any:
        """Poll `check(fleet)` (a coroutine function) until it returns something truthy."""

        async def wait() -> Any:
            fleet = await ctx.live_fleet()
            deadline = asyncio.get_running_loop().time() + timeout_s
            while True:
                found = await check(fleet)
                if found:
                    return found
                if asyncio.get_running_loop().time() > deadline:
                    raise TimeoutError(f"not within {timeout_s:.0f} s")
                await asyncio.sleep(0.05)

        return self.run(wait(), timeout_s + 10)

    def close(self) -> None:
        """Close every console, stop the fleet and everything it ran."""
        try:
            for _fleet, ctx in list(self.consoles):
                self.close_console(ctx)
        finally:
            self.loop.run(self.demo.stop())
            self.loop.close()
