"""Supervision with real processes: detached shards, claims, stop, adoption, logs."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agent_process import AgentClient, agent_env
from ports import free_port

PY = sys.executable


def wait_until(check: Callable[[], object], timeout_s: float = 20.0) -> object:
    """Poll `check` until it returns something true; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"still not true after {timeout_s} s: {check}")


def process_state(pid: int) -> str | None:
    return process_state_of(Path(f"/proc/{pid}/stat"))


def every_thread_stopped(pid: int) -> bool:
    """Every thread of `pid` in the stopped state: SIGSTOP stops them one by one, and the
    main thread showing `T` leaves a thread still running (the one that reaps children)."""
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    return bool(threads) and all(process_state_of(t / "stat") == "T" for t in threads)


def process_state_of(stat: Path) -> str | None:
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def alive(pid: int) -> bool:
    return process_state(pid) not in (None, "Z")


def main_command(code: str, **extra: object) -> dict:
    return {"name": "engine", "argv": [PY, "-S", "-c", code], "role": "main", **extra}


def shard_spec(code: str, gpus: list[str], **extra: object) -> dict:
    return {
        "replica": "demo",
        "rank": 0,
        "gpus": gpus,
        "commands": [main_command(code)],
        "spec": {"model": "tiny", "engine": "sim"},
        **extra,
    }


SLEEPER = "import time; print('engine up', flush=True); time.sleep(120)"


def listed(agent: AgentClient, shard_id: str) -> dict:
    shards = agent.call("shard.list")["shards"]
    return next(shard for shard in shards if shard["shard_id"] == shard_id)


def log_lines(agent: AgentClient, shard_id: str, tail: int = 1000) -> list[str]:
    request_id = agent.send("shard.logs", {"shard_id": shard_id, "tail": tail})
    lines: list[str] = []
    while True:
        message = agent.next_message(request_id)
        if "event" not in message:
            assert message["ok"], message
            return lines
        lines.extend(message["event"]["lines"])


def test_a_shard_runs_on_after_the_agent_that_started_it_is_killed_and_a_new_agent_adopts_it(
    agent: AgentClient, state_dir: Path, tmp_path: Path
) -> None:
    started = agent.call("shard.start", shard_spec(SLEEPER, ["0"]))
    shard_id = started["shard_id"]
    main_pid = wait_until(lambda: listed(agent, shard_id)["main_pid"])
    wait_until(lambda: "engine up" in log_lines(agent, shard_id))
    agent.kill()

    time.sleep(0.3)
    assert alive(main_pid)
    assert alive(started["pid"])
    second = AgentClient(agent_env(state_dir), stderr_path=tmp_path / "second.stderr")
    try:
        shard = listed(second, shard_id)
        assert shard["phase"] == "running"
        assert shard["supervisor_alive"] is True
        assert shard["main_pid"] == main_pid
        assert shard["spec"] == {"model": "tiny", "engine": "sim"}
        assert second.call("claims")["claims"][0]["shard_id"] == shard_id
        stopped = second.call("shard.stop", {"shard_id": shard_id, "timeout_s": 5})
        assert stopped["phase"] == "stopped"
        assert not alive(main_pid)
        assert second.call("claims") == {"claims": []}
    finally:
        second.close()


def test_a_held_card_is_refused_twice_and_given_again_once_freed(agent: AgentClient) -> None:
    first = agent.call("shard.start", shard_spec(SLEEPER, ["0", "3"]))

    refused = agent.request("shard.start", shard_spec(SLEEPER, ["3"]))
    assert refused["error"]["code"] == "busy"
    assert "GPU 3 is held by shard " + first["shard_id"] in refused["error"]["message"]
    refused_again = agent.request("shard.start", shard_spec(SLEEPER, ["1", "0"]))
    assert refused_again["error"]["code"] == "busy"
    assert [claim["gpu"] for claim in agent.call("claims")["claims"]] == ["0", "3"]

    agent.call("shard.stop", {"shard_id": first["shard_id"], "timeout_s": 5})
    assert agent.call("claims") == {"claims": []}
    again = agent.call("shard.start", shard_spec(SLEEPER, ["1", "0"]))
    assert {claim["gpu"] for claim in agent.call("claims")["claims"]} == {"0", "1"}
    agent.call("shard.stop", {"shard_id": again["shard_id"], "timeout_s": 5})


def test_an_engine_that_ignores_sigterm_is_killed_after_the_stop_timeout(
    agent: AgentClient,
) -> None:
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ignoring SIGTERM', flush=True); time.sleep(120)"
    )
    shard_id = agent.call("shard.start", shard_spec(stubborn, ["0"]))["shard_id"]
    wait_until(lambda: "ignoring SIGTERM" in log_lines(agent, shard_id))
    main_pid = listed(agent, shard_id)["main_pid"]

    stopped = agent.call("shard.stop", {"shard_id": shard_id, "timeout_s": 0.5})

    assert stopped["phase"] == "stopped"
    assert stopped["killed"] is True
    assert not alive(main_pid)
    shard = listed(agent, shard_id)
    assert shard["commands"][0]["exit_code"] == -signal.SIGKILL
    assert "SIGKILL after the stop timeout" in shard["reason"]
    assert agent.call("claims") == {"claims": []}


def test_a_dead_supervisor_left_as_a_zombie_counts_as_dead(
    agent: AgentClient, state_dir: Path, tmp_path: Path
) -> None:
    started = agent.call("shard.start", shard_spec(SLEEPER, ["2"]))
    shard_id = started["shard_id"]
    main_pid = wait_until(lambda: listed(agent, shard_id)["main_pid"])
    # Freeze the agent that would reap its supervisor, then kill the supervisor:
    # it stays a zombie. Its engine is killed too (nothing left alive).
    os.kill(agent.proc.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: every_thread_stopped(agent.proc.pid))
        os.kill(started["pid"], signal.SIGKILL)
        os.killpg(main_pid, signal.SIGKILL)
        wait_until(lambda: not alive(started["pid"]) and not alive(main_pid))
        assert Path(f"/proc/{started['pid']}").exists()  # a zombie, not gone

        other = AgentClient(agent_env(state_dir), stderr_path=tmp_path / "other.stderr")
        try:
            shard = listed(other, shard_id)
            assert shard["phase"] == "failed"
            assert "zombie" in shard["reason"]
            assert other.call("claims") == {"claims": []}
        finally:
            other.close()
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)


def test_logs_are_split_on_carriage_returns_and_capped_keeping_the_newest(
    agent: AgentClient,
) -> None:
    noisy = (
        "import sys\n"
        "sys.stdout.write('Loading shards: 0%\\rLoading shards: 50%\\rLoading shards: 100%\\n')\n"
        "for i in range(2000): print('line %04d ' % i + 'x' * 40)\n"
        "print('the last line')\n"
    )
    shard_id = agent.call("shard.start", shard_spec(noisy, [], log_max_bytes=16384))["shard_id"]
    shard = wait_until(
        lambda: (s := listed(agent, shard_id))["phase"] in ("exited", "failed") and s
    )
    assert shard["phase"] == "exited"
    assert shard["exit_code"] == 0
    assert shard["log_bytes"] <= 16384

    lines = log_lines(agent, shard_id, tail=5000)
    assert lines[-1].startswith("[llmgw] shard exited")
    assert lines[-2] == "the last line"
    assert "line 1999 " + "x" * 40 in lines
    assert "line 0000 " + "x" * 40 not in lines  # the oldest fell off the cap


def test_progress_bars_drawn_with_carriage_returns_become_separate_lines(
    agent: AgentClient,
) -> None:
    bar = (
        "import sys\n"
        "sys.stdout.write('Loading shards: 0%\\rLoading shards: 50%\\rLoading shards: 100%\\r\\n')\n"
    )
    shard_id = agent.call("shard.start", shard_spec(bar, []))["shard_id"]
    wait_until(lambda: listed(agent, shard_id)["phase"] == "exited")
    engine_lines = [line for line in log_lines(agent, shard_id) if not line.startswith("[llmgw]")]
    assert engine_lines == ["Loading shards: 0%", "Loading shards: 50%", "Loading shards: 100%"]


def test_a_follow_streams_new_lines_and_ends_with_the_shard(agent: AgentClient) -> None:
    ticker = "import time\nfor i in range(5):\n    print('tick', i, flush=True); time.sleep(0.2)\n"
    shard_id = agent.call("shard.start", shard_spec(ticker, []))["shard_id"]
    request_id = agent.send("shard.logs", {"shard_id": shard_id, "tail": 0, "follow": True})
    lines: list[str] = []
    while True:
        message = agent.next_message(request_id)
        if "event" not in message:
            break
        lines.extend(message["event"]["lines"])
    assert message["result"]["phase"] == "exited"
    assert message["result"]["cancelled"] is False
    assert "tick 4" in lines


def test_a_sidecar_is_waited_for_on_its_port_before_the_main_command_starts(
    agent: AgentClient,
) -> None:
    port = free_port()
    sidecar = {
        "name": "rpc",
        "role": "sidecar",
        "argv": [
            PY,
            "-S",
            "-c",
            "import socket, time; time.sleep(0.5); s = socket.socket(); "
            f"s.bind(('127.0.0.1', {port})); s.listen(); print('listening', flush=True); "
            "time.sleep(120)",
        ],
        "wait_for_port": port,
    }
    spec = shard_spec(SLEEPER, ["0"])
    spec["commands"] = [sidecar, *spec["commands"]]
    shard_id = agent.call("shard.start", spec)["shard_id"]
    wait_until(lambda: "engine up" in log_lines(agent, shard_id))
    lines = log_lines(agent, shard_id)
    assert lines.index("[rpc] listening") < lines.index("engine up")
    shard = listed(agent, shard_id)
    assert [c["name"] for c in shard["commands"]] == ["rpc", "engine"]
    pids = [c["pid"] for c in shard["commands"]]

    agent.call("shard.stop", {"shard_id": shard_id, "timeout_s": 5})
    assert not any(alive(pid) for pid in pids)


def test_a_missing_binary_fails_the_shard_with_the_reason_and_frees_its_cards(
    agent: AgentClient,
) -> None:
    spec = shard_spec("", ["0"])
    spec["commands"] = [{"name": "vllm", "argv": ["/nonexistent/bin/vllm", "serve", "m"]}]
    shard_id = agent.call("shard.start", spec)["shard_id"]
    shard = wait_until(lambda: (s := listed(agent, shard_id))["phase"] == "failed" and s)
    assert "could not start vllm (/nonexistent/bin/vllm)" in shard["reason"]
    assert agent.call("claims") == {"claims": []}


def test_an_engine_exiting_with_an_error_fails_the_shard_with_its_code(
    agent: AgentClient,
) -> None:
    shard_id = agent.call("shard.start", shard_spec("raise SystemExit(3)", ["0"]))["shard_id"]
    shard = wait_until(lambda: (s := listed(agent, shard_id))["phase"] == "failed" and s)
    assert shard["exit_code"] == 3
    assert shard["reason"] == "the engine exited with code 3"
    assert agent.call("shard.forget", {"shard_id": shard_id})["forgotten"] is True
    assert agent.call("shard.list") == {"shards": []}


def test_a_running_shard_cannot_be_forgotten_and_a_stopped_one_stops_again_quietly(
    agent: AgentClient,
) -> None:
    shard_id = agent.call("shard.start", shard_spec(SLEEPER, []))["shard_id"]
    assert agent.request("shard.forget", {"shard_id": shard_id})["error"]["code"] == "busy"
    agent.call("shard.stop", {"shard_id": shard_id, "timeout_s": 5})
    again = agent.call("shard.stop", {"shard_id": shard_id})
    assert again["phase"] == "stopped"


def test_a_malformed_spec_is_refused_before_anything_starts(agent: AgentClient) -> None:
    bad_specs = [
        {"replica": "r", "rank": 0, "commands": []},
        {"replica": "r", "rank": 0, "gpus": [3], "commands": [main_command("pass")]},
        {"replica": "r", "rank": 0, "gpus": ["../x"], "commands": [main_command("pass")]},
        {"replica": "r", "rank": 0, "commands": [{"argv": "vllm serve"}]},
        {"replica": "r", "rank": -1, "commands": [main_command("pass")]},
        {"replica": "r", "rank": 0, "shard_id": "a/b", "commands": [main_command("pass")]},
        {
            "replica": "r",
            "rank": 0,
            "commands": [main_command("pass"), {"argv": ["x"], "role": "sidecar"}],
        },
    ]
    for spec in bad_specs:
        reply = agent.request("shard.start", spec)
        assert reply["error"]["code"] == "bad_args", (spec, reply)
    assert agent.call("shard.list") == {"shards": []}
    assert agent.call("claims") == {"claims": []}


def test_a_secret_reaches_the_engines_environment_and_none_of_the_shards_files(
    agent: AgentClient, state_dir: Path
) -> None:
    secret = "sk-secret-env-7f3a"
    # The engine checks the value reversed, so its own argv does not hold the secret.
    code = (
        f"import os, time; print('key', os.environ['MY_KEY'][::-1] == {secret[::-1]!r}, "
        "flush=True); time.sleep(60)"
    )
    started = agent.call("shard.start", shard_spec(code, [], secret_env={"MY_KEY": secret}))
    shard_id = started["shard_id"]
    wait_until(lambda: "key True" in log_lines(agent, shard_id))
    directory = state_dir / "shards" / shard_id
    assert not any(secret.encode() in p.read_bytes() for p in directory.iterdir() if p.is_file())
    assert secret not in json.dumps(listed(agent, shard_id))
    agent.call("shard.stop", {"shard_id": shard_id})


def test_a_secret_env_that_is_not_names_to_strings_is_refused(agent: AgentClient) -> None:
    for bad in ({"1X": "v"}, {"K": 3}, ["K=v"]):
        reply = agent.request("shard.start", shard_spec("pass", [], secret_env=bad))
        assert reply["error"]["code"] == "bad_args", (bad, reply)
    assert agent.call("shard.list") == {"shards": []}
