"""The `sim` engine: vLLM's own command lines, run by the simulated nodes' agents (pure).

A replayed node's agent runs the sim engine in place of whatever real
engine a command names (`llmgw_agent.sim.engine.args.engine_kind`), reading
the real argv. So `sim` builds exactly what vLLM would be given — Ray or
multiprocessing by the version the simulated node reports — and the demo
exercises the same commands a real fleet gets. `validate` keeps it off real
nodes, where those commands would start a real vLLM.
"""

from __future__ import annotations

from llmgw_core.engines import vllm
from llmgw_core.engines.spec import LaunchNode, LaunchRequest, ShardCommand


def commands(request: LaunchRequest, node: LaunchNode) -> tuple[ShardCommand, ...]:
    """The processes of `node`'s shard: vLLM's."""
    return vllm.commands(request, node)
