"""A service's lease in a real agent's state: one holder at a time, lapsing, given back.

Two agent processes on one state folder stand for two operators' SSH
connections to the node that keeps the leases.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from agent_process import AgentClient, agent_env


def _agent(state_dir: Path, tmp_path: Path, name: str) -> AgentClient:
    return AgentClient(agent_env(state_dir), stderr_path=tmp_path / f"{name}.stderr")


def test_one_holder_at_a_time_and_the_refusal_names_the_holder_and_since_when(
    state_dir: Path, tmp_path: Path
):
    first, second = _agent(state_dir, tmp_path, "a"), _agent(state_dir, tmp_path, "b")
    try:
        taken = first.call("lease.take", {"name": "chat", "holder": "ana@laptop (pid 1)"})
        assert taken["holder"] == "ana@laptop (pid 1)" and taken["token"]
        refused = second.request("lease.take", {"name": "chat", "holder": "bo@desk (pid 2)"})
        assert refused["error"]["code"] == "held"
        message = refused["error"]["message"]
        assert "service chat is held by ana@laptop (pid 1) since " in message
        assert time.strftime("%Y-%m-%d", time.gmtime(taken["since"])) in message
        assert second.call("lease.list")["leases"][0]["holder"] == "ana@laptop (pid 1)"
        # Another service is another lease.
        assert second.call("lease.take", {"name": "code", "holder": "bo"})["name"] == "code"
        # A release with the wrong token leaves the lease alone.
        wrong = second.call("lease.release", {"name": "chat", "token": "not-it"})
        assert wrong == {"name": "chat", "released": False}
        assert first.call("lease.release", {"name": "chat", "token": taken["token"]})["released"]
        assert second.call("lease.take", {"name": "chat", "holder": "bo"})["holder"] == "bo"
    finally:
        first.close()
        second.close()


def test_a_lease_not_renewed_lapses_and_its_late_renewal_is_refused(
    state_dir: Path, tmp_path: Path
):
    first, second = _agent(state_dir, tmp_path, "a"), _agent(state_dir, tmp_path, "b")
    try:
        taken = first.call("lease.take", {"name": "chat", "holder": "ana", "ttl_s": 0.3})
        renewed = first.call("lease.renew", {"name": "chat", "token": taken["token"], "ttl_s": 0.3})
        assert renewed["expires_at"] > taken["expires_at"]
        assert second.request("lease.take", {"name": "chat", "holder": "bo"})["ok"] is False
        time.sleep(0.4)
        assert second.call("lease.take", {"name": "chat", "holder": "bo"})["holder"] == "bo"
        late = first.request("lease.renew", {"name": "chat", "token": taken["token"]})
        assert late["error"]["code"] == "lost"
        assert "held by bo" in late["error"]["message"]
    finally:
        first.close()
        second.close()


def test_a_connection_that_ends_gives_its_leases_back(state_dir: Path, tmp_path: Path):
    holder, other = _agent(state_dir, tmp_path, "a"), _agent(state_dir, tmp_path, "b")
    try:
        holder.call("lease.take", {"name": "chat", "holder": "ana", "ttl_s": 3600})
        assert other.request("lease.take", {"name": "chat", "holder": "bo"})["ok"] is False
        holder.close()  # its SSH channel closed: the holder is gone
        assert other.call("lease.take", {"name": "chat", "holder": "bo"})["holder"] == "bo"
    finally:
        other.close()


def _take(agent: AgentClient, name: str, replies: list[dict]) -> None:
    replies.append(agent.request("lease.take", {"name": name, "holder": str(agent.proc.pid)}))


def test_twenty_racers_one_lease(state_dir: Path, tmp_path: Path):
    agents = [_agent(state_dir, tmp_path, f"r{i}") for i in range(4)]
    try:
        for round_number in range(20):
            name = f"race-{round_number}"
            replies: list[dict] = []
            threads = [threading.Thread(target=_take, args=(a, name, replies)) for a in agents]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(r["ok"] for r in replies) == [False, False, False, True]
            assert {r["error"]["code"] for r in replies if not r["ok"]} == {"held"}
    finally:
        for a in agents:
            a.close()


def test_a_drained_shard_says_since_when(agent: AgentClient):
    assert agent.request("shard.drain", {"shard_id": "nothing"})["error"]["code"] == "not_found"


def test_scale_events_are_counted_past_any_lease(state_dir: Path, tmp_path: Path):
    first, second = _agent(state_dir, tmp_path, "a"), _agent(state_dir, tmp_path, "b")
    try:
        first.call("service.count", {"name": "chat", "direction": "out"})
        second.call("service.count", {"name": "chat", "direction": "out"})
        assert second.call("service.count", {"name": "chat", "direction": "in"})["total"] == 1
        assert first.call("service.counts")["counts"] == {"chat": {"out": 2, "in": 1}}
        wrong = first.request("service.count", {"name": "chat", "direction": "up"})
        assert wrong["error"]["code"] == "bad_args"
    finally:
        first.close()
        second.close()
