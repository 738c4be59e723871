"""`shard.nccl` gives a decode worker's last KV hand-off lines apart from its start-up lines.

A decode worker logs one hand-off line per request for as long as it serves. Read with NCCL's
first lines they would show the oldest requests and, on a busy worker, push NCCL's own lines out
of the first `limit`; so the agent reads them in the same pass and keeps only the last
`recent`, which is what the replica page shows.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent_process import AgentClient

from llmgw_agent.logcap import LOG_NAME
from llmgw_agent.sim.engine.transfer import received_line


def _decode_worker_log(state_dir: Path, requests: int) -> str:
    """A shard whose kept log is a decode worker's: NCCL and the KV's path at start, then one
    hand-off line a request (the sim's own), the older file holding the first ones."""
    shard_id = "chat-pd-decode-1-r0-test"
    directory = state_dir / "shards" / shard_id
    directory.mkdir(parents=True)
    (directory / "shard.json").write_text(json.dumps({"shard_id": shard_id}))
    start = [
        "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB",
        "KV transfer: NixlConnector either over InfiniBand on mlx5_0:1,mlx5_1:1",
    ]
    moved = [received_line(1_048_576 * n, 0.001 * n, 8.0 * n) for n in range(1, requests + 1)]
    half = len(moved) // 2
    (directory / (LOG_NAME + ".1")).write_text("\n".join([*start, *moved[:half]]) + "\n")
    (directory / LOG_NAME).write_text("\n".join(["INFO: 200 OK", *moved[half:]]) + "\n")
    return shard_id


def test_the_last_hand_offs_come_apart_and_never_crowd_out_nccls_first_lines(
    agent: AgentClient, state_dir: Path
):
    shard_id = _decode_worker_log(state_dir, requests=50)
    said = agent.call("shard.nccl", {"shard_id": shard_id, "limit": 2, "recent": 3})
    assert said["lines"] == [
        "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB",
        "KV transfer: NixlConnector either over InfiniBand on mlx5_0:1,mlx5_1:1",
    ]
    assert said["truncated"] is False
    assert said["recent"] == [
        received_line(1_048_576 * n, 0.001 * n, 8.0 * n) for n in (48, 49, 50)
    ]


def test_a_recent_past_a_thousand_is_refused_and_without_it_the_answer_is_as_before(
    agent: AgentClient, state_dir: Path
):
    shard_id = _decode_worker_log(state_dir, requests=2)
    reply = agent.request("shard.nccl", {"shard_id": shard_id, "recent": 5000})
    assert reply["ok"] is False and reply["error"]["code"] == "bad_args", reply
    assert "recent" in reply["error"]["message"]
    # An older console asks without `recent`: the hand-offs stay among the first lines.
    old = agent.call("shard.nccl", {"shard_id": shard_id})
    assert "recent" not in old and len(old["lines"]) == 4
