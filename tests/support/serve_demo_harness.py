"""One demo fleet shared by a test module, driven from a loop on its own thread.

pytest runs tests synchronously; the fleet lives on an asyncio loop that
outlives each test (one demo start per module keeps the suite fast). Steps
are called exactly as the runner calls them, with a `StepContext` whose
live fleet is this one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from llmgw_core.fleet.fleet import Fleet
from llmgw_core.fleet.sim.demo import DemoFleet, start_demo_fleet
from llmgw_core.fleet.ssh import SshConnector
from llmgw_core.script.registry import StepContext, StepOutcome, all_steps


class LoopThread:
    """An event loop running on a thread; `run(coro)` waits for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout_s: float = 180.0) -> Any:
        """Run `coro` on the loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


class FleetContext(StepContext):
    """A step context whose live fleet is an already-open one."""

    def __init__(self, fleet: Fleet, script_dir: Path) -> None:
        super().__init__(script_dir=script_dir, described_fleet=None, inventory=None, demo=True)
        self._fleet = fleet

    async def live_fleet(self) -> Fleet:
        return self._fleet


async def open_console(demo: DemoFleet, *, retry_max_s: float = 1.0) -> Fleet:
    """A console's fleet on the demo nodes (every console gets its own connections)."""
    fleet = Fleet(
        demo.inventory, SshConnector(demo.settings), retry_initial_s=0.2, retry_max_s=retry_max_s
    )
    await fleet.start()
    await fleet.wait_settled(120)
    return fleet


async def start_demo(root: Path) -> DemoFleet:
    """The demo fleet in `root` (its nodes forward ports, as an sshd does by default)."""
    root.mkdir(parents=True, exist_ok=True)
    return await start_demo_fleet(root)


async def step(ctx: StepContext, step_name: str, /, **args: Any) -> StepOutcome:
    """Run one step as the runner does (its arguments validated first)."""
    found = all_steps()[step_name]
    return await found.call(found.args_model.model_validate(args), ctx)


class Demo:
    """The module's demo fleet, one console on it, and a way to run steps."""

    def __init__(self, root: Path) -> None:
        self.loop = LoopThread()
        self.demo = self.loop.run(start_demo(root / "demo"))
        self.fleet = self.loop.run(open_console(self.demo))
        self.ctx = FleetContext(self.fleet, root)

    def step(self, step_name: str, /, **args: Any) -> Any:
        return self.loop.run(step(self.ctx, step_name, **args), 300)

    def claims(self) -> dict[str, list[str]]:
        async def read() -> dict[str, list[str]]:
            found = {}
            for node in self.fleet.snapshot().ready():
                answer = await self.fleet.request(node.name, "claims")
                if answer["claims"]:
                    found[node.name] = [c["gpu"] for c in answer["claims"]]
            return found

        return self.loop.run(read())

    def close(self) -> None:
        try:
            self.loop.run(self.ctx.close())
            self.loop.run(self.fleet.close())
        finally:
            self.loop.run(self.demo.stop())
            self.loop.close()
