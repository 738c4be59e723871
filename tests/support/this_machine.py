"""This machine as a node, for a console run as a person runs it: an SSH server on loopback
(asyncssh's in a thread, or OpenSSH's sshd), the inventory naming it, `llmgw-tui --run`.

The real-engine tests (llama.cpp, vLLM) serve through it: the node's agent discovers
this machine and its shards run the real commands; the processes a run leaves behind
are found by a path only that run names, and ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from llmgw_agent.discover.engines import EXTRA_PREFIXES_ENV
from llmgw_core.fleet.loopback import LoopbackSshd

NODE = "here"
LLMGW_TUI = [sys.executable, "-c", "import sys; from llmgw_tui.cli import main; sys.exit(main())"]
"""The console, run as a person runs it (the `llmgw-tui` entry point) from this interpreter."""


@contextlib.contextmanager
def sshd_in_a_thread(server: LoopbackSshd) -> Iterator[LoopbackSshd]:
    """Run the loopback SSH server on its own event loop, for a console in another process."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(30)
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def processes_naming(text: str) -> dict[int, str]:
    """The live processes whose command line mentions `text`: pid → command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command:
            found[int(entry.name)] = command
    return found


def end_processes(processes: dict[int, str]) -> None:
    """End processes this test started (found by its own temporary paths), by their ids."""
    for pid in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


@dataclass(frozen=True)
class NodeLogin:
    """How the console reaches the node: its SSH port and user, its host key, the engines to name."""

    port: int
    user: str | None
    known_hosts: str
    engines: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def node_sshd(folder: Path, client_key: asyncssh.SSHKey) -> LoopbackSshd:
    """asyncssh's server for this machine as a node, its home under `folder` (not started).

    Its sessions name this environment's prefix to the agent (`LLMGW_ENGINE_PREFIXES`),
    so the agent finds llama-cpp-python here, as an operator names a virtualenv.
    """
    return LoopbackSshd(
        home=folder / "node" / "home",
        host_key=asyncssh.generate_private_key("ssh-ed25519"),
        authorized_keys=client_key.export_public_key().decode(),
        env={EXTRA_PREFIXES_ENV: sys.prefix},
        allow_forwarding=True,
    )


@contextlib.contextmanager
def asyncssh_login(folder: Path, client_key: asyncssh.SSHKey) -> Iterator[NodeLogin]:
    """This machine behind asyncssh's server; its agent finds llama-cpp-python by the prefix named."""
    server = node_sshd(folder, client_key)
    with sshd_in_a_thread(server):
        yield NodeLogin(server.port, None, server.known_hosts_line() + "\n")


@contextlib.contextmanager
def openssh_login(folder: Path, client_key: asyncssh.SSHKey) -> Iterator[NodeLogin]:
    """This machine behind OpenSSH's sshd (skips where it is not installed).

    sshd gives sessions a bare environment, so the inventory says where
    llama-cpp-python is, as an operator would for a virtualenv. Its sessions' home
    is asyncssh's (`node_sshd`): one run may start what the next, over the other
    server, finds on the node.
    """
    from fleet.conftest import ClientKey, OpenSshd  # the fleet tests' sshd on loopback ports

    client = ClientKey(client_key, folder / "client_key")
    sshd = OpenSshd(folder / "sshd", client, home=folder / "node" / "home").start()
    try:
        yield NodeLogin(
            sshd.ports[0],
            sshd.user,
            sshd.known_hosts_lines(),
            {"llama.cpp": {"python": sys.executable}},
        )
    finally:
        sshd.stop()


LOGINS = {"asyncssh": asyncssh_login, "openssh": openssh_login}


def run_script_on_this_machine(
    folder: Path,
    steps: str,
    model_dir: Path,
    leftovers_of: str,
    *,
    ssh: str = "asyncssh",
    engines: Mapping[str, Mapping[str, str]] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 240,
) -> tuple[subprocess.CompletedProcess[str], dict[int, str]]:
    """Run `llmgw-tui --inventory … --run … --json` against this machine as node `here`.

    The console is a separate process with its own home (no ~/.ssh/config,
    no ssh-agent); the node is this machine behind an SSH server on loopback.

    Args:
        folder: where the keys, inventory, script and the node's home go.
        steps: the script's `steps:` list, as YAML lines.
        model_dir: the node's model directory.
        leftovers_of: a path only this run's engines name on their command line.
        ssh: "asyncssh" (its server in a thread here) or "openssh" (sshd).
        engines: where the node's engines are (the inventory's `engines:`), over the login's own.
        env: more of the console's environment (a key it puts in front of the engines).
        timeout: seconds the console may take.

    Returns:
        The finished console, and the processes still naming `leftovers_of`
        afterwards (ended before returning: they should not have been there).
    """
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    key_path = folder / "client_key"
    key_path.write_bytes(client_key.export_private_key())
    key_path.chmod(0o600)
    script = folder / "script.yaml"
    script.write_text("steps:\n" + steps)
    console_env = {key: value for key, value in os.environ.items() if key != "SSH_AUTH_SOCK"}
    console_env.update(HOME=str(folder / "console"), NO_COLOR="1", **(env or {}))
    with LOGINS[ssh](folder, client_key) as login:
        known_hosts = folder / "known_hosts"
        known_hosts.write_text(login.known_hosts)
        user = f"    user: {login.user}\n" if login.user else ""
        named = {**login.engines, **(engines or {})}
        engine_lines = f"    engines: {json.dumps(named)}\n" if named else ""  # JSON is YAML
        inventory = folder / "inventory.yaml"
        inventory.write_text(
            f"nodes:\n  - name: {NODE}\n    host: 127.0.0.1\n    port: {login.port}\n{user}"
            f"    identity_file: {key_path}\n    model_dirs: [{model_dir}]\n"
            f"{engine_lines}known_hosts: {known_hosts}\n"
        )
        done = subprocess.run(
            [*LLMGW_TUI, "--inventory", str(inventory), "--run", str(script), "--json"],
            capture_output=True,
            text=True,
            env=console_env,
            timeout=timeout,
        )
        left_running = processes_naming(leftovers_of)
        end_processes(left_running)
    return done, left_running
