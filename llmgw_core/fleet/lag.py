"""Timeouts that do not count the time the console's own event loop could not run.

At 2,048 nodes on a busy machine the console's loop can be seconds late: it
is busy with every other node's bytes, or the machine gives it no CPU. A
handshake that waits for the loop is not a slow node; timing it out marks a
healthy node unreachable, and its retry costs a second handshake. So the
connect and banner timeouts are measured here on the loop's own clock minus
its lateness: a ticker sleeps `tick_s` at a time and adds up how late each
wake-up came. A deadline moves by the lateness gathered while it waits, up
to `stretch` times the timeout in all, so a dead node is still given up on
when the console is starved for good.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from llmgw_core.cancelling import cancel_and_wait

T = TypeVar("T")

TICK_S = 0.1
MAX_STRETCH = 4.0
"""A timeout of t seconds ends after 4 t of wall time at most, however late the loop."""


class LoopLag:
    """How late this loop has been, in all, since it was first asked (seconds)."""

    def __init__(self, tick_s: float = TICK_S, stretch: float = MAX_STRETCH) -> None:
        self.tick_s = tick_s
        self.stretch = stretch
        self._late_s = 0.0
        self._due: float | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def lag_s(self) -> float:
        """Lateness gathered so far, including that of the tick still overdue."""
        self._ensure_ticking()
        now = asyncio.get_running_loop().time()
        overdue = max(0.0, now - self._due) if self._due is not None else 0.0
        return self._late_s + overdue

    def _ensure_ticking(self) -> None:
        loop = asyncio.get_running_loop()
        if self._ticker is None or self._ticker.done() or self._loop is not loop:
            self._loop = loop
            self._due = None
            self._ticker = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._due = loop.time() + self.tick_s
            await asyncio.sleep(self.tick_s)
            self._late_s += max(0.0, loop.time() - self._due)

    async def wait_done(self, task: asyncio.Future[Any], timeout_s: float) -> bool:
        """Wait for `task` up to `timeout_s` of time the loop could run; True when it is done.

        The task is left running either way (the caller decides what to do with it).
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        lag_before = self.lag_s()
        ceiling = started + timeout_s * self.stretch
        while not task.done():
            deadline = min(started + timeout_s + (self.lag_s() - lag_before), ceiling)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.wait({task}, timeout=remaining)
        return True

    async def wait_for(self, awaitable: Awaitable[T], timeout_s: float | None) -> T:
        """`asyncio.wait_for`, with the loop's lateness left out of `timeout_s`.

        Raises:
            asyncio.TimeoutError: it did not finish in time (it is cancelled).
        """
        task = asyncio.ensure_future(awaitable)
        try:
            if timeout_s is None:
                return await task
            if not await self.wait_done(task, timeout_s):
                raise asyncio.TimeoutError
            return task.result()
        finally:
            if not task.done():
                await cancel_and_wait(task)

    async def close(self) -> None:
        """Stop the ticker."""
        if self._ticker is not None and self._loop is asyncio.get_running_loop():
            await cancel_and_wait(self._ticker)
            self._ticker = None
