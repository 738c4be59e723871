"""Supervision's harder cases: a lost supervisor, a zipapp agent, how shards outlive logout."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import subprocess
import sys
import zipapp
from pathlib import Path

import pytest
from agent_process import AGENT_ROOT, AgentClient, agent_env
from test_supervise import SLEEPER, alive, listed, log_lines, shard_spec, wait_until

from llmgw_agent.keepalive import keepalive_method


def test_a_shard_whose_supervisor_was_killed_is_still_stopped_by_the_agent(
    agent: AgentClient,
) -> None:
    started = agent.call("shard.start", shard_spec(SLEEPER, ["4"]))
    shard_id = started["shard_id"]
    wait_until(lambda: "engine up" in log_lines(agent, shard_id))
    main_pid = listed(agent, shard_id)["main_pid"]
    os.kill(started["pid"], signal.SIGKILL)
    wait_until(lambda: not alive(started["pid"]))

    shard = listed(agent, shard_id)
    assert shard["phase"] == "running"
    assert shard["supervisor_alive"] is False
    assert "the engine still runs" in shard["reason"]
    assert agent.call("claims")["claims"][0]["gpu"] == "4"

    stopped = agent.call("shard.stop", {"shard_id": shard_id, "timeout_s": 5})
    assert stopped["phase"] == "stopped"
    assert not alive(main_pid)
    assert agent.call("claims") == {"claims": []}


def test_an_agent_run_from_a_zipapp_supervises_shards_from_the_same_zipapp(
    state_dir: Path, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    shutil.copytree(AGENT_ROOT / "llmgw_agent", source / "llmgw_agent")
    archive = tmp_path / "agent-test.pyz"
    zipapp.create_archive(source, archive, main="llmgw_agent.__main__:main")
    env = agent_env(state_dir)
    env.pop("PYTHONPATH")
    client = AgentClient(env, command=[sys.executable, "-S", str(archive), "serve"])
    try:
        shard_id = client.call("shard.start", shard_spec(SLEEPER, ["0"]))["shard_id"]
        wait_until(lambda: "engine up" in log_lines(client, shard_id))
        shard = listed(client, shard_id)
        supervisor_cmdline = Path(f"/proc/{shard['pid']}/cmdline").read_bytes()
        assert str(archive).encode() in supervisor_cmdline
        client.call("shard.stop", {"shard_id": shard_id, "timeout_s": 5})
    finally:
        client.close()


def _logind(tmp_path: Path, text: str) -> list[str]:
    conf = tmp_path / "logind.conf"
    conf.write_text("[Login]\n" + text)
    return [str(conf)]


def test_where_logind_leaves_sessions_alone_setsid_is_enough(tmp_path: Path) -> None:
    method, reason = keepalive_method(_logind(tmp_path, "#KillUserProcesses=no\n"))
    assert method == "setsid"
    assert "not set" in reason


@pytest.mark.skipif(shutil.which("systemd-run") is None, reason="systemd-run is not installed")
def test_where_logind_kills_sessions_a_lingering_user_gets_a_transient_scope(
    tmp_path: Path,
) -> None:
    confs = _logind(tmp_path, "KillUserProcesses=yes\nKillExcludeUsers=\n")
    linger = tmp_path / "linger"
    linger.mkdir()
    method, reason = keepalive_method(confs, str(linger))
    assert method is None
    assert f"loginctl enable-linger {getpass.getuser()}" in reason
    (linger / getpass.getuser()).touch()
    assert keepalive_method(confs, str(linger))[0] == "systemd-run"


def test_a_user_excluded_from_logind_killing_keeps_setsid(tmp_path: Path) -> None:
    confs = _logind(tmp_path, f"KillUserProcesses=yes\nKillExcludeUsers={getpass.getuser()}\n")
    assert keepalive_method(confs, str(tmp_path))[0] == "setsid"


def test_a_follow_keeps_going_across_log_rotations_in_order(agent: AgentClient) -> None:
    noisy = (
        "import time\n"
        "for i in range(600):\n"
        "    print('line %04d' % i + ' ' + 'z' * 60, flush=True)\n"
        "    if i % 50 == 0: time.sleep(0.05)\n"
        "print('the end', flush=True)\n"
    )
    spec = shard_spec(noisy, [], log_max_bytes=16384)
    shard_id = agent.call("shard.start", spec)["shard_id"]
    request_id = agent.send("shard.logs", {"shard_id": shard_id, "tail": 0, "follow": True})
    lines: list[str] = []
    while "event" in (message := agent.next_message(request_id)):
        lines.extend(message["event"]["lines"])
    assert message["result"]["phase"] == "exited"
    numbers = [int(line.split()[1]) for line in lines if line.startswith("line ")]
    assert numbers == sorted(numbers)
    assert numbers[-1] == 599
    assert "the end" in lines


def test_two_agents_racing_for_one_card_give_it_to_exactly_one_shard(
    agent: AgentClient, state_dir: Path, tmp_path: Path
) -> None:
    other = AgentClient(agent_env(state_dir), stderr_path=tmp_path / "other.stderr")
    try:
        sent = [
            (client, client.send("shard.start", shard_spec(SLEEPER, ["7"])))
            for _ in range(4)
            for client in (agent, other)
        ]
        replies = [client.answer(request_id) for client, request_id in sent]
        winners = [reply["result"]["shard_id"] for reply in replies if reply["ok"]]
        assert len(winners) == 1
        assert {reply["error"]["code"] for reply in replies if not reply["ok"]} == {"busy"}
        assert [c["shard_id"] for c in agent.call("claims")["claims"]] == winners
        assert [s["shard_id"] for s in agent.call("shard.list")["shards"]] == winners
    finally:
        other.close()


def _user_scopes_fail() -> bool:
    if shutil.which("systemd-run") is None:
        return False
    probe = subprocess.run(
        ["systemd-run", "--user", "--scope", "--quiet", "true"], capture_output=True, timeout=20
    )
    return probe.returncode != 0


@pytest.mark.skipif(not _user_scopes_fail(), reason="needs systemd-run whose user scopes fail")
def test_a_transient_scope_that_cannot_start_fails_the_start_with_systemds_words(
    state_dir: Path, tmp_path: Path
) -> None:
    env = agent_env(state_dir, LLMGW_AGENT_KEEPALIVE="systemd-run")
    client = AgentClient(env, stderr_path=tmp_path / "agent.stderr")
    try:
        reply = client.request("shard.start", shard_spec(SLEEPER, ["0"]))
        assert reply["error"]["code"] == "failed"
        assert "exited at once" in reply["error"]["message"]
        (shard,) = client.call("shard.list")["shards"]
        assert shard["phase"] == "failed"
        assert shard["keepalive"] == "systemd-run"
        assert client.call("claims") == {"claims": []}
    finally:
        client.close()


def _planted_shard(state_dir: Path, shard_id: str, supervisor: dict, token: str) -> None:
    """A shard directory as an earlier agent left it, pointing at `supervisor`."""
    directory = state_dir / "shards" / shard_id
    directory.mkdir(parents=True)
    shard = {"shard_id": shard_id, "replica": "old", "rank": 0, "gpus": ["6"], "token": token}
    shard["created_at"] = 1.0
    (directory / "shard.json").write_text(json.dumps(shard))
    (directory / "state.json").write_text(json.dumps({"phase": "running", "commands": []}))
    (directory / "supervisor.json").write_text(json.dumps(supervisor))
    claims = state_dir / "claims"
    claims.mkdir(exist_ok=True)
    holder = {"shard_id": shard_id, "replica": "old", "rank": 0, "token": token}
    (claims / "6").write_text(json.dumps(holder))


def _start_ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


@pytest.mark.parametrize(
    ("shift_ticks", "carries_token", "why"),
    [
        (0, False, "does not carry this shard's token"),
        (1, True, "now belongs to another process"),
    ],
)
def test_adoption_trusts_a_pid_only_with_its_start_time_and_token(
    state_dir: Path, tmp_path: Path, shift_ticks: int, carries_token: bool, why: str
) -> None:
    token = "f" * 32
    marker = [token] if carries_token else []
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", *marker],
        env=agent_env(state_dir),
    )
    try:
        wait_until(lambda: Path(f"/proc/{stranger.pid}/cmdline").read_bytes().count(b"\0") >= 3)
        recorded = {"pid": stranger.pid, "start_ticks": _start_ticks(stranger.pid) + shift_ticks}
        _planted_shard(state_dir, "old-r0-abc123", recorded, token)
        client = AgentClient(agent_env(state_dir), stderr_path=tmp_path / "agent.stderr")
        try:
            (shard,) = client.call("shard.list")["shards"]
            assert shard["phase"] == "failed"
            assert why in shard["reason"]
            assert client.call("claims") == {"claims": []}
            assert stranger.poll() is None  # a stranger is never signalled
        finally:
            client.close()
    finally:
        stranger.kill()
        stranger.wait()


def _python38() -> str | None:
    """A Python 3.8 that really runs (a pyenv shim may name one it cannot start)."""
    candidates = [str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.8*/bin/python3.8"))]
    candidates.append(shutil.which("python3.8") or "")
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-S", "-c", "pass"], capture_output=True, timeout=20)
        if probe.returncode == 0:
            return candidate
    return None


@pytest.mark.skipif(_python38() is None, reason="no Python 3.8 interpreter on this machine")
def test_under_python_3_8_the_agent_starts_lists_and_stops_a_shard(
    state_dir: Path, tmp_path: Path
) -> None:
    python38 = _python38()
    assert python38 is not None
    client = AgentClient(
        agent_env(state_dir),
        command=[python38, "-S", "-m", "llmgw_agent", "serve"],
        stderr_path=tmp_path / "agent.stderr",
    )
    try:
        assert client.hello["python"].startswith("3.8.")
        shard_id = client.call("shard.start", shard_spec(SLEEPER, ["0"]))["shard_id"]
        wait_until(lambda: "engine up" in log_lines(client, shard_id))
        shard = listed(client, shard_id)
        assert shard["phase"] == "running"
        supervisor_exe = os.readlink(f"/proc/{shard['pid']}/exe")
        assert "3.8" in supervisor_exe
        stopped = client.call("shard.stop", {"shard_id": shard_id, "timeout_s": 5})
        assert stopped["phase"] == "stopped"
    finally:
        client.close()


# --- nothing another user of the node can read or enter --------------------------------

PRINT_ARGV = "import sys, time; print('argv', sys.argv[1], flush=True); time.sleep(120)"


def test_the_supervisors_command_line_holds_no_token_and_its_environment_proves_it_ours(
    agent: AgentClient, state_dir: Path
) -> None:
    started = agent.call("shard.start", shard_spec(SLEEPER, ["0"]))
    shard_id = started["shard_id"]
    wait_until(lambda: "engine up" in log_lines(agent, shard_id))
    token = json.loads((state_dir / "shards" / shard_id / "shard.json").read_text())["token"]
    supervisor = Path(f"/proc/{started['pid']}")
    assert token.encode() not in supervisor.joinpath("cmdline").read_bytes()  # what `ps` shows
    assert f"LLMGW_SHARD_TOKEN={token}".encode() in supervisor.joinpath("environ").read_bytes()
    shard = listed(agent, shard_id)
    assert shard["supervisor_alive"] is True  # judged by the token in its environment
    engine = Path(f"/proc/{shard['main_pid']}")
    assert token.encode() not in engine.joinpath("cmdline").read_bytes()
    stopped = agent.call("shard.stop", {"shard_id": shard_id, "timeout_s": 5})
    assert stopped["phase"] == "stopped"


def test_a_command_that_names_a_secret_on_its_command_line_is_refused(
    agent: AgentClient,
) -> None:
    secret = "hf_" + "x" * 30
    spec = shard_spec(f"print({secret!r})", ["0"], secret_env={"HF_TOKEN": secret})
    reply = agent.request("shard.start", spec)
    assert reply["ok"] is False
    assert reply["error"]["code"] == "bad_args"
    assert reply["error"]["message"] == (
        "engine's command line holds the secret HF_TOKEN, and every user of the node can read "
        "a command line: pass it in secret_env only"
    )
    assert agent.call("claims") == {"claims": []}


def test_a_private_folder_is_made_for_the_placeholder_and_goes_when_the_shard_is_forgotten(
    agent: AgentClient, state_dir: Path
) -> None:
    spec = shard_spec(PRINT_ARGV, ["0"])
    spec["commands"][0]["argv"].append("@LLMGW_PRIVATE_DIR@/ray")
    shard_id = agent.call("shard.start", spec)["shard_id"]
    lines = wait_until(lambda: [line for line in log_lines(agent, shard_id) if "argv" in line])
    given = Path(lines[0].split()[-1])
    private = given.parent
    recorded = json.loads((state_dir / "shards" / shard_id / "shard.json").read_text())
    assert recorded["private_dir"] == str(private) and given.name == "ray"
    # Ray opens its own --temp-dir to everyone; the folder above it lets no one else in.
    assert private.stat().st_mode & 0o777 == 0o700 and private.stat().st_uid == os.getuid()
    assert len(str(private)) <= 39  # Ray's sockets, 68 characters below, fit in 107 bytes
    assert "@LLMGW_PRIVATE_DIR@" in recorded["commands"][0]["argv"][-1]  # as the console sent it
    agent.call("shard.stop", {"shard_id": shard_id, "timeout_s": 5})
    assert private.is_dir()  # Ray's session logs stay while the shard is kept
    agent.call("shard.forget", {"shard_id": shard_id})
    assert not private.exists()


def test_the_agents_placeholder_is_the_one_the_core_writes() -> None:
    from llmgw_agent.shards import start
    from llmgw_core.engines import ray_cluster

    assert start.PRIVATE_DIR_PLACEHOLDER == ray_cluster.PRIVATE_DIR_PLACEHOLDER


def test_a_replayed_node_runs_the_sim_in_an_engines_place_unless_the_start_says_real(
    state_dir: Path, tmp_path: Path
) -> None:
    """The demo's CPU node with `--engine vllm=PATH`: `real: true` runs the argv as written."""
    from llmgw_agent.sim.profiles import write_profile

    capture = write_profile("cpu", tmp_path / "capture", hostname="cpu-01")
    program = tmp_path / "bin" / "vllm"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\nexec sleep 60\n")
    program.chmod(0o755)
    client = AgentClient(
        agent_env(state_dir, LLMGW_AGENT_REPLAY=str(capture)), stderr_path=tmp_path / "err"
    )
    argv = [str(program), "serve", "/models/tiny", "--port", "18123"]
    run = {}
    try:
        refused = _start_both(client, argv, run, state_dir)
    finally:
        client.close()
    assert run[True] == argv
    assert "sim-engine" in run[False] and run[False][-len(argv) :] == argv
    assert refused["error"]["code"] == "bad_args"


def _start_both(client: AgentClient, argv: list[str], run: dict, state_dir: Path) -> dict:
    for real in (False, True):
        spec = {
            "replica": f"tiny-{real}",
            "rank": 0,
            "gpus": [],
            "commands": [{"name": "vllm", "argv": argv, "role": "main"}],
            "real": real,
        }
        started = client.call("shard.start", spec)
        record = json.loads((state_dir / "shards" / started["shard_id"] / "shard.json").read_text())
        run[real] = record["commands"][0]["run_argv"]
        client.call("shard.stop", {"shard_id": started["shard_id"], "timeout_s": 5})
    return client.request("shard.start", {**spec, "replica": "x", "real": "yes"})
