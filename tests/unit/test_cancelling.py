"""Ending background tasks: a cancel of the caller is never swallowed by the clean-up."""

from __future__ import annotations

import asyncio

import pytest

from llmgw_core.cancelling import cancel_and_wait


async def _slow_to_stop(stopping: asyncio.Event) -> None:
    """A task that takes a moment to end once cancelled (it closes a channel, say)."""
    try:
        await asyncio.sleep(3600)
    finally:
        stopping.set()
        await asyncio.shield(asyncio.sleep(0.2))


def test_the_callers_cancel_during_the_clean_up_goes_through():
    async def caller(stopping: asyncio.Event, after: list[str]) -> None:
        helper = asyncio.ensure_future(_slow_to_stop(stopping))
        await asyncio.sleep(0)
        await cancel_and_wait(helper)
        after.append("ran on")  # only if the cancel was swallowed

    async def scenario() -> tuple[bool, list[str]]:
        stopping, after = asyncio.Event(), []
        task = asyncio.ensure_future(caller(stopping, after))
        await stopping.wait()  # the caller waits for its helper to end
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled(), after

    cancelled, after = asyncio.run(scenario())
    assert cancelled and after == []


def test_tasks_are_cancelled_and_their_ends_read_without_raising():
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("closing failed") from None

    async def scenario() -> list[bool]:
        tasks = [
            asyncio.ensure_future(asyncio.sleep(3600)),
            asyncio.ensure_future(fails_on_cancel()),
        ]
        finished = asyncio.ensure_future(asyncio.sleep(0))
        await finished
        await asyncio.sleep(0)
        await cancel_and_wait(*tasks, finished, None)
        return [task.done() for task in (*tasks, finished)]

    assert asyncio.run(scenario()) == [True, True, True]
