"""Where the console's fleet snapshots and every other answer come from.

`FleetFeed` (`protocol`) is the contract; `LiveFeed` (`live`) keeps it over
SSH, `StaticFeed` (`static`) for a fleet that never changes.
"""

from llmgw_tui.feed.live import (
    LOG_TAIL_LINES,
    ConsoleContext,
    LiveFeed,
    inventory_fabrics,
    summary_off_loop,
)
from llmgw_tui.feed.protocol import FleetFeed, running_shards, shard_prefix, with_shards
from llmgw_tui.feed.static import StaticFeed

__all__ = [
    "LOG_TAIL_LINES",
    "ConsoleContext",
    "FleetFeed",
    "LiveFeed",
    "StaticFeed",
    "inventory_fabrics",
    "running_shards",
    "shard_prefix",
    "summary_off_loop",
    "with_shards",
]
