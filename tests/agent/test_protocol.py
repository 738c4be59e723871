"""The wire, spoken to a real agent subprocess running with `python -S`."""

from __future__ import annotations

import json
import platform

from agent_process import AgentClient, agent_env


def test_the_first_line_is_hello_with_versions_and_capabilities(agent: AgentClient) -> None:
    hello = agent.hello
    assert hello["protocol"] == 1
    assert hello["python"] == platform.python_version()
    assert hello["pid"] == agent.proc.pid
    assert hello["replay"] is False
    for op in ("ping", "facts", "doctor", "shard.start", "shard.stop", "shard.list", "cancel"):
        assert op in hello["capabilities"]


def test_a_ping_is_answered_with_its_own_id(agent: AgentClient) -> None:
    reply = agent.request("ping")
    assert reply["ok"] is True
    assert reply["result"]["pong"] is True


def test_string_ids_come_back_unchanged(agent: AgentClient) -> None:
    request_id = agent.send("ping", request_id="node-a:17")
    assert agent.answer(request_id)["id"] == "node-a:17"


def test_a_line_that_is_not_json_is_answered_bad_json_and_serving_goes_on(
    agent: AgentClient,
) -> None:
    agent.send_line(b"this is not json")
    error = agent.unaddressed.get(timeout=10)
    assert error["ok"] is False
    assert error["error"]["code"] == "bad_json"
    assert agent.request("ping")["ok"] is True


def test_an_unknown_op_names_the_known_ones(agent: AgentClient) -> None:
    reply = agent.request("reboot")
    assert reply["error"]["code"] == "unknown_op"
    assert "shard.start" in reply["error"]["message"]


def test_wrong_args_are_answered_bad_args(agent: AgentClient) -> None:
    assert agent.request("shard.stop", {"shard_id": 7})["error"]["code"] == "bad_args"
    assert agent.request("shard.stop", {})["error"]["code"] == "bad_args"
    assert agent.request("ping", args=None)["ok"] is True
    agent.send_line(json.dumps({"id": 5, "op": "ping", "args": [1]}).encode())
    assert agent.answer(5)["error"]["code"] == "bad_args"


def test_a_line_of_megabytes_is_refused_and_the_next_request_answered(
    agent: AgentClient,
) -> None:
    agent.send_line(
        b'{"id": 1, "op": "ping", "args": {"pad": "' + b"x" * (3 * 1024 * 1024) + b'"}}'
    )
    error = agent.unaddressed.get(timeout=20)
    assert error["error"]["code"] == "too_large"
    assert agent.request("ping")["ok"] is True


def test_an_id_already_in_flight_is_refused(agent: AgentClient, tmp_path) -> None:
    watch = agent.send("download.watch", {"path": str(tmp_path), "interval_s": 0.1}, "w")
    agent.next_message(watch)  # the first event: the stream is running
    agent.send("ping", request_id="w")
    duplicate = agent.answer("w")
    assert duplicate["error"]["code"] == "bad_request"
    agent.call("cancel", {"target": "w"})
    assert agent.answer("w")["result"]["cancelled"] is True


def test_cancelling_nothing_says_so(agent: AgentClient) -> None:
    assert agent.call("cancel", {"target": "no-such-stream"}) == {"cancelled": False}


def test_many_requests_in_flight_are_each_answered(agent: AgentClient, tmp_path) -> None:
    stream = agent.send("download.watch", {"path": str(tmp_path), "interval_s": 0.05})
    ids = [agent.send("ping") for _ in range(50)]
    for request_id in ids:
        assert agent.answer(request_id)["ok"] is True
    agent.call("cancel", {"target": stream})
    assert agent.answer(stream)["result"]["cancelled"] is True


def test_facts_answer_with_the_facts_or_say_discovery_is_missing(agent: AgentClient) -> None:
    reply = agent.request("facts", timeout_s=60)
    if reply["ok"]:
        assert isinstance(reply["result"], dict)
    else:
        assert reply["error"]["code"] == "unavailable"


def test_closing_stdin_ends_the_agent_cleanly(agent: AgentClient) -> None:
    agent.request("ping")
    assert agent.close() == 0


def test_closing_stdin_with_a_stream_in_flight_still_ends_the_agent(
    agent: AgentClient, tmp_path
) -> None:
    agent.send("download.watch", {"path": str(tmp_path), "interval_s": 0.1})
    agent.request("ping")
    assert agent.close() == 0


def test_a_download_watch_reports_bytes_and_when_they_last_moved(
    agent: AgentClient, tmp_path
) -> None:
    target = tmp_path / "weights"
    target.mkdir()
    (target / "model-00001.safetensors").write_bytes(b"x" * 1000)
    stream = agent.send("download.watch", {"path": str(target), "interval_s": 0.1})
    first = agent.next_message(stream)["event"]
    assert (first["bytes"], first["files"], first["exists"]) == (1000, 1, True)
    with open(target / "model-00002.safetensors", "wb") as part:
        part.write(b"y" * 500)
    while (event := agent.next_message(stream)["event"])["bytes"] != 1500:
        pass
    assert event["last_moved_at"] >= first["last_moved_at"]
    agent.call("cancel", {"target": stream})
    final = agent.answer(stream)
    assert final["result"]["cancelled"] is True
    assert final["result"]["bytes"] == 1500


def test_a_download_watch_on_a_missing_path_says_it_does_not_exist(
    agent: AgentClient, tmp_path
) -> None:
    stream = agent.send("download.watch", {"path": str(tmp_path / "nope"), "interval_s": 0.1})
    assert agent.next_message(stream)["event"] == {
        "bytes": 0,
        "files": 0,
        "exists": False,
        "last_moved_at": None,
    }
    agent.call("cancel", {"target": stream})
    assert agent.answer(stream)["ok"] is True


def test_facts_from_a_missing_capture_directory_fail_with_the_reason(state_dir, tmp_path) -> None:
    client = AgentClient(agent_env(state_dir), "--replay", str(tmp_path / "no-such-capture"))
    try:
        reply = client.request("facts")
        assert reply["error"]["code"] == "failed"
        assert "does not exist" in reply["error"]["message"]
        assert client.request("ping")["ok"] is True
    finally:
        client.close()
