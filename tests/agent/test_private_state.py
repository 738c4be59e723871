"""The nodes are shared: what the agent keeps on them is its user's alone.

Real agent processes on private state folders: the folder is 0700 and every
file in it (records, engine logs) is the user's only; a folder found open to
others is closed and doctor says so; a secret-named variable in a command's
ordinary `env` (which `shard.json` keeps on the disk) is refused, and so is a
number that is not finite.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from agent_process import AgentClient, agent_env
from test_supervise import SLEEPER, log_lines, shard_spec, wait_until


def _open_to_others(root: Path) -> list[str]:
    """Every path under `root` (itself included) that a group or other user may read or enter."""
    found = []
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink() and path.lstat().st_mode & 0o077:
            found.append(f"{path.relative_to(root.parent)} {stat.filemode(path.lstat().st_mode)}")
    return found


def test_a_new_state_folder_and_everything_a_shard_writes_are_the_users_only(
    tmp_path: Path,
) -> None:
    state = tmp_path / "fresh" / "state"  # not there yet: the agent makes it
    client = AgentClient(agent_env(state), stderr_path=tmp_path / "agent.stderr")
    try:
        started = client.call("shard.start", shard_spec(SLEEPER, []))
        wait_until(lambda: "engine up" in log_lines(client, started["shard_id"]))
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        assert (state / "shards" / started["shard_id"] / "shard.json").exists()
        assert _open_to_others(state) == []
        client.call("shard.stop", {"shard_id": started["shard_id"], "timeout_s": 5})
    finally:
        client.close()


def test_a_state_folder_found_open_is_closed_with_its_files_and_doctor_says_so(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    (state / "shards" / "old").mkdir(parents=True)
    (state / "shards" / "old" / "engine.log").write_text("an older agent's log\n")
    os.chmod(state, 0o755)
    os.chmod(state / "shards" / "old" / "engine.log", 0o644)
    client = AgentClient(agent_env(state), stderr_path=tmp_path / "agent.stderr")
    try:
        checks = {c["check"]: c for c in client.call("doctor", {})["checks"]}
    finally:
        client.close()
    assert _open_to_others(state) == []
    assert checks["state"]["status"] == "warn"
    assert "open to other users (0755) and closed it (0700)" in checks["state"]["message"]
    assert "rotate any key or token" in checks["state"]["fix"]


def test_a_state_folder_the_agent_cannot_close_is_a_doctor_warning(tmp_path: Path) -> None:
    from llmgw_agent.doctor import run_checks

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)  # as if another user's, which the agent may not change
    (check,) = [c for c in run_checks({}, state_dir=shared) if c["check"] == "state"]
    assert check["status"] == "warn"
    assert "is open to other users of this node (0755)" in check["message"]
    assert check["fix"].startswith(f"chmod 700 {shared}")


def test_a_secret_in_a_commands_own_env_is_refused_naming_it(agent: AgentClient) -> None:
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD", "X_SECRET"):
        spec = shard_spec("pass", [])
        spec["commands"][0]["env"] = {"NCCL_DEBUG": "INFO", name: "planted-value"}
        reply = agent.request("shard.start", spec)
        assert reply["error"]["code"] == "bad_args", (name, reply)
        message = reply["error"]["message"]
        assert f"commands[0].env names {name}, a secret: send it in secret_env" in message
        assert "planted-value" not in message
    # A tuning variable that merely contains the letters is not a secret.
    spec = shard_spec("pass", [])
    spec["commands"][0]["env"] = {"TOKENIZERS_PARALLELISM": "false"}
    assert agent.call("shard.start", spec)["phase"] == "starting"
    assert agent.request("shard.start", shard_spec("pass", [], secret_env={"HF_TOKEN": "x"}))["ok"]


def test_the_agents_secret_rule_is_the_consoles() -> None:
    from llmgw_agent.secret_names import SECRET_NAME
    from llmgw_core.engines.allowlist import is_secret_key

    names = [
        "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY", "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD", "GCP_CREDENTIALS", "TOKENIZERS_PARALLELISM", "NCCL_DEBUG",
        "SSH_PRIVATE_KEY", "MY_PASSWD", "OMP_NUM_THREADS", "API_KEY", "TOKEN",
    ]  # fmt: skip
    assert [bool(SECRET_NAME.search(n)) for n in names] == [is_secret_key(n) for n in names]


def test_a_number_that_is_not_finite_is_bad_args_not_internal(agent: AgentClient) -> None:
    for literal in ("NaN", "Infinity", "-Infinity", "1e400"):
        spec = json.dumps(shard_spec("pass", [])).replace('"rank": 0', '"rank": 0, "x": 0')
        line = '{"id": 7, "op": "shard.start", "args": ' + spec.replace(
            '"x": 0', f'"stop_timeout_s": {literal}'
        )
        agent.send_line((line + "}").encode())
        reply = agent.answer(7)
        assert reply["error"]["code"] == "bad_args", (literal, reply)
        assert "stop_timeout_s" in reply["error"]["message"]
    assert agent.call("shard.list") == {"shards": []}
    assert sys.float_info.max < float("1e400")  # the overflow literal is infinite in JSON
