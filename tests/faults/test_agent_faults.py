"""Faults at one agent, with real processes: a full state disk, starters racing for a dead claim.

The full disk is a real one: a tmpfs of 1 MiB mounted on the agent's state
directory and filled to ENOSPC by a file (mounting needs root).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import AgentClient, agent_env
from matrix import fill

PY = sys.executable
AGENT = Path(__file__).resolve().parents[2] / "agent"


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (the state directory to be), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    state = tmp_path / "state"
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(state)], check=True)
    try:
        yield state
    finally:
        subprocess.run(["umount", "-l", str(state)], check=True)


@pytest.fixture
def agent_on(full_disk: Path, tmp_path: Path) -> Iterator[AgentClient]:
    client = AgentClient(agent_env(full_disk), stderr_path=tmp_path / "agent.stderr")
    try:
        yield client
    finally:
        for shard in client.call("shard.list")["shards"]:
            client.call("shard.stop", {"shard_id": shard["shard_id"], "timeout_s": 2})
        client.close()


def spec(code: str, gpus: list[str]) -> dict:
    return {
        "replica": "full",
        "rank": 0,
        "gpus": gpus,
        "commands": [{"name": "engine", "argv": [PY, "-S", "-c", code], "role": "main"}],
        "spec": {"model": "tiny", "engine": "sim"},
    }


def wait_until(check, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"still not true after {timeout_s} s")


def test_a_start_on_a_full_state_disk_is_refused_in_one_sentence_and_claims_nothing(
    agent_on: AgentClient, full_disk: Path
):
    filler = fill(full_disk)
    answer = agent_on.request("shard.start", spec("print('up')", ["0", "1"]))
    assert answer["ok"] is False
    assert answer["error"]["code"] == "failed"
    assert answer["error"]["message"] == (
        f"the agent cannot write its state directory {full_disk}: No space left on device"
    )
    filler.unlink()
    assert agent_on.call("claims")["claims"] == []
    assert agent_on.call("shard.list")["shards"] == []


def test_an_engine_logging_on_a_full_disk_is_never_blocked_and_its_end_frees_its_cards(
    agent_on: AgentClient, full_disk: Path, tmp_path: Path
):
    marker = tmp_path / "engine-got-through"
    # 400 KiB of output, far beyond a pipe's 64 KiB: a pump stuck on the full
    # disk would block the engine before it writes the marker.
    code = (
        "import sys, time\n"
        "sys.stdin = None\n"
        "time.sleep(0.5)\n"
        "for i in range(4000): print('line %05d ' % i + 'x' * 90, flush=True)\n"
        f"open({str(marker)!r}, 'w').write('done')\n"
        "time.sleep(3)\n"
        "sys.exit(7)\n"
    )
    started = agent_on.call("shard.start", spec(code, ["0", "1"]))
    wait_until(lambda: agent_on.call("shard.list")["shards"][0]["phase"] == "running", 20)
    filler = fill(full_disk)
    wait_until(marker.exists, 30)
    shard = wait_until(
        lambda: next(
            (s for s in agent_on.call("shard.list")["shards"] if s["phase"] == "failed"), None
        ),
        30,
    )
    assert shard["shard_id"] == started["shard_id"]
    assert shard["reason"].startswith(
        ("the engine exited with code 7", "its supervising process died")
    ), shard["reason"]
    assert agent_on.call("claims")["claims"] == []
    filler.unlink()
    logged = (full_disk / "shards" / started["shard_id"] / "engine.log").read_text()
    numbered = [line for line in logged.splitlines() if line.startswith("line ")]
    assert numbered and numbered[-1] < "line 03999"  # the rest were dropped, not waited for


RACER = r"""
import sys, time
sys.path.insert(0, sys.argv[3])
from llmgw_agent.shards import claims
from llmgw_agent.op_args import OpError

def dead(holder):
    time.sleep(0.002)  # judging a holder reads its shard's records and /proc
    return holder.get("shard_id") == "dead"

go = float(sys.argv[2])
while time.time() < go:
    pass
try:
    claims.acquire(["0", "1", "2", "3"], {"shard_id": sys.argv[1], "token": "t"}, dead)
    print("won")
except OpError:
    print("lost")
"""


def test_six_starters_taking_over_a_dead_shards_cards_at_once_give_them_to_exactly_one(
    tmp_path: Path,
):
    state = tmp_path / "state"
    (state / "claims").mkdir(parents=True)
    env = {**os.environ, "LLMGW_AGENT_STATE": str(state)}
    for trial in range(8):
        for gpu in "0123":
            (state / "claims" / gpu).write_text(json.dumps({"shard_id": "dead"}))
        go = time.time() + 0.8
        racers = [
            subprocess.Popen(
                [PY, "-S", "-c", RACER, f"starter-{i}", str(go), str(AGENT)],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for i in range(6)
        ]
        said = [racer.communicate(timeout=30)[0].strip() for racer in racers]
        holders = {json.loads((state / "claims" / gpu).read_text())["shard_id"] for gpu in "0123"}
        assert said.count("won") == 1, (trial, said, holders)
        assert holders == {f"starter-{said.index('won')}"}
        for gpu in "0123":
            (state / "claims" / gpu).unlink()
