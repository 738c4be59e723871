"""Helpers for the agent tests: a real agent subprocess and a private state dir.

Every test gets its own `LLMGW_AGENT_STATE`; after the test every process that
still carries that state dir in its environment (agents, supervisors, engines
the test started) is killed by pid, and the test fails if any was left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import AgentClient, agent_env, processes_with_state


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A private agent state dir; fails the test if it leaves processes behind."""
    path = tmp_path / "state"
    path.mkdir(mode=0o700)  # as the agent makes it (test_private_state tries an open one)
    yield path
    deadline = time.monotonic() + 5
    while (left := processes_with_state(path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left running by the test: {left}"


@pytest.fixture
def agent(state_dir: Path, tmp_path: Path) -> Iterator[AgentClient]:
    """A running `serve` agent on a private state dir; its shards stopped afterwards."""
    # The test's own folder is a configured model directory: downloads are watched there.
    env = agent_env(state_dir, LLMGW_AGENT_MODEL_DIRS=str(tmp_path))
    client = AgentClient(env, stderr_path=tmp_path / "agent.stderr")
    yield client
    if client.proc.poll() is None:
        reply = client.request("shard.list")
        for shard in reply.get("result", {}).get("shards", []):
            if shard["phase"] in ("starting", "running"):
                client.request("shard.stop", {"shard_id": shard["shard_id"], "timeout_s": 5})
        client.close()
