"""The fabric ops: the two halves of a rail test, an all-reduce, and the verdicts kept.

Each op takes a whole spec and checks it in its own module (`fabric/half.py`,
`fabric/allreduce.py`, `fabric/verdicts.py`), with the same `arg`/`number_arg`
rules as every table.
"""

from __future__ import annotations

from llmgw_agent.ops import Op, operation

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


@operation(Op.FABRIC_PROBE)
def fabric_probe(args: dict, call: Any) -> dict:
    """`fabric.probe` → `{ib_write_bw, numactl, replay}`: what this node can run
    (`fabric/run.py`)."""
    from llmgw_agent.fabric import run

    return run.fabric_probe(args, call.replay)


@operation(Op.FABRIC_SERVER)
def fabric_server(args: dict, call: Any) -> dict:
    """`fabric.server` (a half's spec, `fabric/half.py`) → event `{listening, method, port,
    address}` once a client may connect, then the tool's raw output (`fabric/run.py`)."""
    from llmgw_agent.fabric import run

    return run.fabric_server(args, call.emit, call.cancelled, call.replay)


@operation(Op.FABRIC_CLIENT)
def fabric_client(args: dict, call: Any) -> dict:
    """`fabric.client` (a half's spec) → the tool's raw output, run against a server half
    already listening (`fabric/run.py`)."""
    from llmgw_agent.fabric import run

    return run.fabric_client(args, call.emit, call.cancelled, call.replay)


@operation(Op.FABRIC_ALL_REDUCE)
def fabric_all_reduce(args: dict, call: Any) -> dict:
    """`fabric.all_reduce` `{hosts, gpus_per_node, …}` → `{argv, exit_code, output,
    simulated}`: all_reduce_perf across the hosts (`fabric/allreduce.py`)."""
    from llmgw_agent.fabric import allreduce

    return allreduce.all_reduce(args, call.emit, call.cancelled, call.replay)


@operation(Op.FABRIC_RECORD)
def fabric_record(args: dict, _call: Any) -> dict:
    """`fabric.record` `{rails: [{peer, adapter, verdict, rail?, ratio?, measured_gbps?,
    rated_gbps?, measured_at?}]}` → `{recorded, rails}` (`fabric/verdicts.py`)."""
    from llmgw_agent.fabric.verdicts import record_verdicts

    return record_verdicts(args)


@operation(Op.FABRIC_VERDICTS, args={})
def fabric_verdicts(_given: dict, _call: Any) -> dict:
    """`fabric.verdicts` → `{rails}`: the fabric verdicts this node keeps (the facts carry
    them too, as `rail_verdicts`)."""
    from llmgw_agent.fabric.verdicts import read_verdicts

    return {"rails": read_verdicts()}
