"""Ending background tasks without swallowing the caller's own cancel.

`task.cancel()` followed by `with suppress(CancelledError): await task` has a
hole: when the *caller* is cancelled while it waits there, that suppress eats
the caller's CancelledError too, and the caller runs on as if never cancelled
(a keeper told to stop that keeps cycling; a test's timeout that never ends
it). `asyncio.wait` does not raise for the tasks it waits on, only for a
cancel of the caller, so the caller's cancel always goes through.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel each task and wait until every one has ended (Nones are skipped).

    What a task ended with (its cancel, an error it raised while stopping) is
    read and dropped: this is clean-up, and the caller goes on. A cancel of the
    caller while it waits is raised, as any await raises it.
    """
    given = [task for task in tasks if task is not None]
    for task in given:
        task.cancel()
    pending = [task for task in given if not task.done()]
    if pending:
        await asyncio.wait(pending)
    for task in given:
        if not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" at exit
