"""What the serving steps of one script share: the live fleet's tunnels to engines.

A script that serves and then asks, benchmarks or waits on health reaches the
engines through one `EngineReach` (one tunnel per engine port), opened on
first use and closed with the script.
"""

from __future__ import annotations

import weakref
from typing import Any

from llmgw_core.serve.http import EngineReach, close_quietly

_REACHES: weakref.WeakKeyDictionary[Any, EngineReach] = weakref.WeakKeyDictionary()


async def fleet_and_reach(ctx: Any) -> tuple[Any, EngineReach]:
    """The script's live fleet and its tunnels to engines (opened once per script)."""
    fleet = await ctx.live_fleet()
    reach = _REACHES.get(ctx)
    if reach is None:
        reach = EngineReach(fleet)
        _REACHES[ctx] = reach

        async def close() -> None:
            await close_quietly(reach)

        ctx.add_closer(close)
    return fleet, reach
