"""What a replica's engine said about its memory while it started, read from rank 0's log.

The agent's `shard.head` gives the first lines of rank 0's kept log, where vLLM
prints its KV cache's size, the tokens and concurrency it holds, and its
weights (`engines.startup_lines`). They are set beside the plan's figures; where
the plan fixed one (vLLM on a CPU node) and the engine differs, a sentence says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from llmgw_agent.ops import Op
from llmgw_core.engines.startup_lines import figures_against_plan, startup_figures
from llmgw_core.errors import LlmgwError
from llmgw_core.fleet.client import AgentLost
from llmgw_core.serve.view import ReplicaView

HEAD_LINES = 600
"""How many of rank 0's first lines are read: vLLM says its KV cache within its first 100."""

READ_FOR = ("vllm",)
"""The engines whose start-up lines are read (llama.cpp's and SGLang's are not, yet)."""


async def with_figures(
    fleet: Any, view: ReplicaView, known: dict[str, dict[str, Any]] | None = None
) -> ReplicaView:
    """The replica with its engine's start-up figures (none when rank 0 cannot be read).

    `known` keeps, per rank 0 shard, the figures of an engine that has said its KV
    cache (they do not change after): a console polling its replicas reads each once.
    """
    head = view.head
    if view.phase == "stopped" or head is None or view.spec.get("engine") not in READ_FOR:
        return view
    figures = known.get(head.shard_id) if known is not None else None
    if figures is None:
        try:
            answer = await fleet.request(
                head.node, Op.SHARD_HEAD, {"shard_id": head.shard_id, "limit": HEAD_LINES}
            )
        except (LlmgwError, AgentLost):
            return view  # an agent without shard.head, or gone: the figures stay unknown
        figures = startup_figures(str(line) for line in answer.get("lines") or [])
        if known is not None and "kv_tokens" in figures:
            known[head.shard_id] = figures
    said = figures_against_plan(figures, dict(view.spec.get("way") or {}))
    return dataclasses.replace(view, figures=figures, figure_warnings=tuple(said))


async def with_all_figures(
    fleet: Any, views: Sequence[ReplicaView], known: dict[str, dict[str, Any]] | None = None
) -> tuple[ReplicaView, ...]:
    """`with_figures` for every replica, read at once."""
    return tuple(await asyncio.gather(*(with_figures(fleet, v, known) for v in views)))
