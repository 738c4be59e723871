"""The deployed agent runs from a folder unpacked beside its zipapp, so each start reuses bytecode.

Through OpenSSH's sshd where the console would reach a node; a read-only
cache and PYTHONDONTWRITEBYTECODE are set up on a local process running the
same serve command (sshd gives every session the same clean environment).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw_agent.sim.profiles import write_profile
from llmgw_agent.zip_main import FOLDER_MARKER
from llmgw_core.fleet.client import AgentClient
from llmgw_core.fleet.deploy import REMOTE_CACHE, agent_bundle, ensure_agent, serve_command
from llmgw_core.fleet.ssh import SshTarget

from .conftest import ClientKey, OpenSshd, connector_for

BUNDLE = agent_bundle()
FOLDER_NAME = BUNDLE.file_name[: -len(".pyz")]


@pytest.fixture
def node(tmp_path: Path, client_key: ClientKey, openssh) -> Iterator[tuple[OpenSshd, SshTarget]]:
    sshd = OpenSshd(tmp_path / "sshd", client_key).start()
    openssh.append(sshd)
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_lines())
    target = SshTarget(
        node="n1", host="127.0.0.1", port=sshd.ports[0], user=sshd.user,
        identity_file=str(client_key.path),
    )  # fmt: skip
    yield sshd, target


def start_agents(
    tmp_path: Path, target: SshTarget, count: int = 1, *, deploy: bool = True
) -> list[tuple[dict, int]]:
    """Deploy, then start `count` agents at once; each one's (hello, number of GPUs in its facts)."""
    capture = write_profile("hgx-h100", tmp_path / "capture")
    command = serve_command(replay=str(capture), state_dir=str(tmp_path / "state"))

    async def one(connection) -> tuple[dict, int]:
        client = await AgentClient.start("n1", connection, command)
        try:
            facts = await client.request("facts", timeout_s=60)
        finally:
            await client.close()
        return client.hello, len(facts["gpus"])

    async def scenario() -> list[tuple[dict, int]]:
        connector = connector_for(tmp_path / "known_hosts")
        async with await connector.connect(target) as connection:
            if deploy:
                await ensure_agent(connection, "n1")
            return list(await asyncio.gather(*(one(connection) for _ in range(count))))

    return asyncio.run(scenario())


@pytest.mark.sshd
def test_the_first_start_unpacks_the_agent_and_the_next_reuses_its_bytecode(tmp_path: Path, node):
    sshd, target = node
    cache = sshd.home / REMOTE_CACHE
    cache.mkdir(parents=True)
    (cache / "agent-000000000000").mkdir()  # an older agent whose zip is gone
    crashed = cache / f"{FOLDER_NAME}.tmp-1-dead"  # a start that died an hour ago
    crashed.mkdir()
    os.utime(crashed, (time.time() - 3600, time.time() - 3600))
    writing = cache / f"{FOLDER_NAME}.tmp-2-live"  # one another start may be writing now
    writing.mkdir()
    [(first_hello, first_gpus)] = start_agents(tmp_path, target)

    folder = cache / FOLDER_NAME
    assert first_hello["runs_from"] == "cache" and first_gpus == 8
    assert folder.stat().st_mode & 0o777 == 0o700
    compiled = sorted((folder / "llmgw_agent" / "__pycache__").glob("protocol.*.pyc"))
    assert len(compiled) == 1
    stamp = compiled[0].stat().st_mtime_ns
    assert sorted(path.name for path in cache.iterdir()) == [
        FOLDER_NAME,
        BUNDLE.file_name,
        writing.name,
    ]

    [(second_hello, second_gpus)] = start_agents(tmp_path, target)
    assert second_hello["runs_from"] == "cache" and second_gpus == 8
    assert second_hello["pid"] != first_hello["pid"]
    assert compiled[0].stat().st_mtime_ns == stamp  # read, not written again


@pytest.mark.sshd
def test_a_damaged_folder_is_unpacked_again_and_the_agent_answers(tmp_path: Path, node):
    sshd, target = node
    start_agents(tmp_path, target)
    folder = sshd.home / REMOTE_CACHE / FOLDER_NAME
    protocol = folder / "llmgw_agent" / "protocol.py"
    whole = protocol.read_bytes()
    protocol.write_bytes(whole[: len(whole) // 2])  # cut short, as a full disk would

    [(hello, gpus)] = start_agents(tmp_path, target, deploy=False)
    assert hello["runs_from"] == "cache" and gpus == 8
    assert protocol.read_bytes() == whole
    assert sorted(path.name for path in folder.parent.iterdir()) == [
        FOLDER_NAME,
        BUNDLE.file_name,
    ]


@pytest.mark.sshd
def test_a_folder_that_cannot_be_replaced_leaves_the_agent_on_its_zip(tmp_path: Path, node):
    sshd, target = node
    cache = sshd.home / REMOTE_CACHE
    cache.mkdir(parents=True)
    (cache / FOLDER_NAME).write_text("not a folder\n")

    [(hello, gpus)] = start_agents(tmp_path, target)
    assert hello["runs_from"] == "zip" and gpus == 8
    assert (cache / FOLDER_NAME).read_text() == "not a folder\n"
    assert sorted(path.name for path in cache.iterdir()) == [FOLDER_NAME, BUNDLE.file_name]


@pytest.mark.sshd
def test_agents_starting_at_once_on_a_new_node_share_one_folder(tmp_path: Path, node):
    sshd, target = node
    started = start_agents(tmp_path, target, count=4)
    assert [(hello["runs_from"], gpus) for hello, gpus in started] == [("cache", 8)] * 4
    cache = sshd.home / REMOTE_CACHE
    assert sorted(path.name for path in cache.iterdir()) == [FOLDER_NAME, BUNDLE.file_name]
    assert (cache / FOLDER_NAME / FOLDER_MARKER).is_file()


@pytest.mark.sshd
def test_a_shard_started_by_the_cached_agent_is_supervised_from_the_same_folder(
    tmp_path: Path, node
):
    sshd, target = node
    sleeper = "import time; print('engine up', flush=True); time.sleep(60)"
    spec = {
        "replica": "demo", "rank": 0, "gpus": [], "spec": {"model": "tiny", "engine": "sim"},
        "commands": [{"name": "engine", "argv": [sys.executable, "-S", "-c", sleeper], "role": "main"}],
    }  # fmt: skip
    command = serve_command(state_dir=str(tmp_path / "state"))

    async def scenario() -> tuple[dict, str, dict]:
        connector = connector_for(tmp_path / "known_hosts")
        async with await connector.connect(target) as connection:
            await ensure_agent(connection, "n1")
            client = await AgentClient.start("n1", connection, command)
            try:
                started = await client.request("shard.start", spec, timeout_s=30)
                supervisor = Path(f"/proc/{started['pid']}/cmdline").read_bytes()
                stopped = await client.request(
                    "shard.stop", {"shard_id": started["shard_id"], "timeout_s": 5}, timeout_s=30
                )
            finally:
                await client.close()
            return client.hello, supervisor.decode(errors="replace"), stopped

    hello, supervisor, stopped = asyncio.run(scenario())
    folder = sshd.home / REMOTE_CACHE / FOLDER_NAME
    assert hello["runs_from"] == "cache"
    assert f"sys.path.insert(0, {str(folder)!r})" in supervisor
    assert "supervise" in supervisor
    assert stopped["phase"] in ("stopped", "exited")


# --- a local process running the same serve command -------------------------


def local_home() -> Path:
    """A home every user may enter (an unprivileged user runs the agent when we are root)."""
    home = Path(tempfile.mkdtemp(prefix="llmgw-agent-cache-"))
    home.chmod(0o755)
    cache = home / REMOTE_CACHE
    cache.mkdir(parents=True)
    (cache / BUNDLE.file_name).write_bytes(BUNDLE.payload)
    (cache / BUNDLE.file_name).chmod(0o644)
    return home


def serve_locally(home: Path, extra_env: dict[str, str], *, unprivileged: bool) -> list[str]:
    """Run the serve command as sshd would (HOME, PATH), ask for a ping; the output lines."""
    argv = ["/bin/sh", "-c", serve_command()]
    if unprivileged and os.geteuid() == 0:  # root writes anywhere: run as nobody
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("setpriv (util-linux) is not installed")
        argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", **extra_env}
    done = subprocess.run(
        argv, input='{"id": 1, "op": "ping"}\n', capture_output=True, text=True,
        env=env, cwd=home, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_read_only_cache_runs_the_agent_from_its_zip():
    home = local_home()
    try:
        cache = home / REMOTE_CACHE
        cache.chmod(0o555)
        state = Path(tempfile.mkdtemp(dir=home))
        state.chmod(0o777)
        lines = serve_locally(home, {"LLMGW_AGENT_STATE": str(state)}, unprivileged=True)
        assert '"runs_from":"zip"' in lines[0]
        assert lines[1].startswith('{"id":1,"ok":true,"result":{"pong":true')
        assert [path.name for path in cache.iterdir()] == [BUNDLE.file_name]
    finally:
        (home / REMOTE_CACHE).chmod(0o755)
        shutil.rmtree(home)


def test_where_python_may_not_write_bytecode_nothing_is_unpacked():
    home = local_home()
    try:
        lines = serve_locally(
            home,
            {"PYTHONDONTWRITEBYTECODE": "1", "LLMGW_AGENT_STATE": str(home / "state")},
            unprivileged=False,
        )
        assert '"runs_from":"zip"' in lines[0]
        assert lines[1].startswith('{"id":1,"ok":true')
        assert [path.name for path in (home / REMOTE_CACHE).iterdir()] == [BUNDLE.file_name]
    finally:
        shutil.rmtree(home)
