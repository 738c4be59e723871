"""A clock jump at a node: the agent judges durations on the monotonic clock, not the wall.

Two agents share one state directory, as two consoles' agents on one node
do. The second runs under libfaketime with its wall clock two hours ahead
(`FAKETIME=+2h`) and its monotonic clock left alone
(`FAKETIME_DONT_FAKE_MONOTONIC=1`): exactly what a node whose clock was
stepped (NTP, an operator's `date -s`) looks like to a process.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import AgentClient, agent_env

PY = sys.executable
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SLEEPER = "import time; print('engine up', flush=True); time.sleep(120)"


def spec(gpus: list[str], replica: str) -> dict:
    return {
        "replica": replica,
        "rank": 0,
        "gpus": gpus,
        "commands": [{"name": "engine", "argv": [PY, "-S", "-c", SLEEPER], "role": "main"}],
        "spec": {"model": "tiny", "engine": "sim"},
    }


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[tuple[AgentClient, AgentClient]]:
    """An agent on the true clock and one two hours ahead, on the same state directory."""
    if not LIBFAKETIME.exists() or shutil.which("faketime") is None:
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    state = tmp_path / "state"
    honest = AgentClient(agent_env(state), stderr_path=tmp_path / "honest.stderr")
    ahead = AgentClient(
        agent_env(
            state,
            LD_PRELOAD=str(LIBFAKETIME),
            FAKETIME="+2h",
            FAKETIME_DONT_FAKE_MONOTONIC="1",
        ),
        stderr_path=tmp_path / "ahead.stderr",
    )
    try:
        yield honest, ahead
    finally:
        for shard in honest.call("shard.list")["shards"]:
            honest.call("shard.stop", {"shard_id": shard["shard_id"], "timeout_s": 2})
        honest.close()
        ahead.close()


def test_the_agent_under_faketime_really_sees_its_wall_clock_two_hours_ahead(agents):
    honest, ahead = agents
    skew_s = ahead.call("ping")["time"] - honest.call("ping")["time"]
    assert 7190 < skew_s < 7210


def test_a_start_judged_by_an_agent_whose_clock_jumped_ahead_keeps_its_cards(agents):
    honest, ahead = agents
    for trial in range(6):
        listing = threading.Event()

        def keep_listing(listing: threading.Event = listing) -> None:
            while not listing.is_set():
                ahead.call("shard.list")

        lister = threading.Thread(target=keep_listing)
        lister.start()
        try:
            started = honest.call("shard.start", spec(["0", "1"], f"trial-{trial}"))
        finally:
            listing.set()
            lister.join(30)
        held = {c["gpu"]: c["shard_id"] for c in ahead.call("claims")["claims"]}
        assert held == {"0": started["shard_id"], "1": started["shard_id"]}, trial
        (shard,) = [
            s for s in ahead.call("shard.list")["shards"] if s["shard_id"] == started["shard_id"]
        ]
        assert shard["phase"] in ("starting", "running"), (trial, shard["reason"])
        refused = ahead.request("shard.start", spec(["1"], "thief"))
        assert refused["ok"] is False and refused["error"]["code"] == "busy"
        honest.call("shard.stop", {"shard_id": started["shard_id"], "timeout_s": 2})
        honest.call("shard.forget", {"shard_id": started["shard_id"]})
