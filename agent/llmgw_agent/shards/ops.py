"""The shard ops: start, stop, list, forget, logs, NCCL lines, drain; and the GPU claims.

Each is declared once (`llmgw_agent.ops`); its docstring says what it takes
and answers. The modules that do the work are imported when an op is first
called, so the agent's start stays light.
"""

from __future__ import annotations

from llmgw_agent.op_args import Arg
from llmgw_agent.ops import Op, operation

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SHARD_ID = {"shard_id": Arg((str,))}


@operation(Op.CLAIMS, args={})
def claims(_given: dict, _call: Any) -> dict:
    """`claims` → `{claims: [{gpu, shard_id, replica, rank, claimed_at}]}`."""
    from llmgw_agent.shards.claims import list_claims

    return {"claims": list_claims()}


@operation(Op.SHARD_START)
def shard_start(args: dict, call: Any) -> dict:
    """`shard.start` (a resolved spec, see `shards/spec.py`) → `{shard_id, pid, phase}`.

    `secret_env` goes only into the shard's environment, never its records.
    """
    from llmgw_agent.shards.start import start_shard

    return start_shard(args, replay=call.replay)


@operation(
    Op.SHARD_STOP,
    args={"shard_id": Arg((str,)), "timeout_s": Arg((int, float), None, 0, 3600)},
)
def shard_stop(given: dict, _call: Any) -> dict:
    """`shard.stop` `{shard_id, timeout_s?}` → `{shard_id, phase, exit_code, killed}`."""
    from llmgw_agent.shards.records import stop_shard

    return stop_shard(given["shard_id"], given["timeout_s"])


@operation(Op.SHARD_LIST, args={})
def shard_list(_given: dict, _call: Any) -> dict:
    """`shard.list` → `{shards: [...]}` (see `shards.records.judge_shard`)."""
    from llmgw_agent.shards.records import list_shards

    return {"shards": list_shards()}


@operation(Op.SHARD_FORGET, args=SHARD_ID)
def shard_forget(given: dict, _call: Any) -> dict:
    """`shard.forget` `{shard_id}` → `{shard_id, forgotten}` (a finished shard only)."""
    from llmgw_agent.shards.records import forget_shard

    return forget_shard(given["shard_id"])


@operation(
    Op.SHARD_LOGS,
    args={
        "shard_id": Arg((str,)),
        "tail": Arg((int,), 200, 0, 1_000_000),
        "follow": Arg((bool,), False),
    },
)
def shard_logs(given: dict, call: Any) -> dict:
    """`shard.logs` `{shard_id, tail?=200, follow?=false}` → events `{lines}`, then
    `{lines_sent, cancelled, phase}`."""
    from llmgw_agent.shards.logs import stream_shard_log

    return stream_shard_log(
        given["shard_id"], given["tail"], given["follow"], call.emit, call.cancelled
    )


@operation(
    Op.SHARD_NCCL,
    args={
        "shard_id": Arg((str,)),
        "limit": Arg((int,), 400, 1, 100_000),
        "recent": Arg((int,), 0, 0, 1000),
    },
)
def shard_nccl(given: dict, _call: Any) -> dict:
    """`shard.nccl` `{shard_id, limit?=400, recent?=0}` → `{lines, truncated, recent?}`: the
    first NCCL INFO/WARN lines of the shard's kept log (what transport NCCL chose), and with
    `recent` the last KV hand-off lines of a decode worker (the rate its requests get now)."""
    from llmgw_agent.shards.nccl import nccl_lines

    return nccl_lines(given["shard_id"], given["limit"], given["recent"])


@operation(Op.SHARD_HEAD, args={"shard_id": Arg((str,)), "limit": Arg((int,), 600, 1, 20_000)})
def shard_head(given: dict, _call: Any) -> dict:
    """`shard.head` `{shard_id, limit?=600}` → `{lines, truncated}`: the first lines of the
    shard's kept log (what its engine said while it started: weights, KV cache, concurrency)."""
    from llmgw_agent.shards.nccl import first_lines

    return first_lines(given["shard_id"], given["limit"])


@operation(
    Op.SHARD_ADAPTERS,
    args={"shard_id": Arg((str,)), "adapters": Arg((list,), items=(dict,))},
)
def shard_adapters(given: dict, _call: Any) -> dict:
    """`shard.adapters` `{shard_id, adapters: [{name, source, lora_id?}]}` → `{shard_id,
    adapters}`: records the LoRA adapters the shard's engine holds now, after a console
    loaded or unloaded some at runtime (`shard.list` shows them, gateways route by them)."""
    from llmgw_agent.shards.records import record_adapters

    return record_adapters(given["shard_id"], given["adapters"])


@operation(Op.SHARD_DRAIN, args=SHARD_ID)
def shard_drain(given: dict, _call: Any) -> dict:
    """`shard.drain` `{shard_id}` → `{shard_id, draining_since}`: marks a shard draining
    (gateways take its replica out of rotation; `shard.list` shows it)."""
    from llmgw_agent.shards.records import drain_shard

    return drain_shard(given["shard_id"])
