"""Real SSH servers for the fleet tests: asyncssh's in-process, and OpenSSH's sshd.

Both run on 127.0.0.1 with generated host keys, a generated client key and
a known_hosts file pinning exactly those keys. OpenSSH's tests skip, saying
why, where `sshd` is not installed.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest
from ports import free_port as free_port

from llmgw_core.fleet.fleet import Fleet
from llmgw_core.fleet.loopback import LoopbackSshd
from llmgw_core.fleet.ssh import SshConnector, SshSettings
from llmgw_core.fleet.state import FleetState
from llmgw_core.inventory import Inventory

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)


@dataclass
class ClientKey:
    """The key the console logs in with, in memory and on disk."""

    key: asyncssh.SSHKey
    path: Path

    @property
    def public(self) -> str:
        return self.key.export_public_key().decode()


@pytest.fixture
def client_key(tmp_path: Path) -> ClientKey:
    key = asyncssh.generate_private_key("ssh-ed25519")
    path = tmp_path / "client_key"
    path.write_bytes(key.export_private_key())
    path.chmod(0o600)
    return ClientKey(key=key, path=path)


def connector_for(known_hosts: Path, config: Path | None = None, **overrides) -> SshConnector:
    """A connector that reads only the files the test wrote (no ~/.ssh, no ssh-agent)."""
    chosen = {"connect_timeout_s": 5.0, "keepalive_interval_s": 1.0, "keepalive_count_max": 2}
    settings = SshSettings(
        known_hosts=known_hosts,
        config_paths=(config,) if config else (),
        use_ssh_agent=False,
        **{**chosen, **overrides},
    )
    return SshConnector(settings)


async def settled(
    inventory: Inventory, connector: SshConnector, timeout_s: float = 30
) -> FleetState:
    """Open a fleet over `inventory`, wait until no node is still connecting, close it.

    Returns:
        The snapshot once settled: each node ready, unreachable or refused.
    """
    fleet = Fleet(inventory, connector)
    try:
        await fleet.start()
        return await fleet.wait_settled(timeout_s)
    finally:
        await fleet.close()


def asyncssh_node(tmp_path: Path, name: str, client: ClientKey, **kwargs) -> LoopbackSshd:
    """An in-process SSH server for one node, with its own home."""
    return LoopbackSshd(
        home=tmp_path / name / "home",
        host_key=asyncssh.generate_private_key("ssh-ed25519"),
        authorized_keys=client.public,
        **kwargs,
    )


class OpenSshd:
    """OpenSSH's sshd in the foreground on loopback ports, for one or several nodes.

    One instance listens on up to 16 ports (sshd's own limit on listen sockets).
    `HOME` is set for every session to `home` (`folder/home` unless given), so nothing lands
    in the real home.
    """

    def __init__(
        self,
        folder: Path,
        client: ClientKey,
        *,
        ports: list[int] | None = None,
        max_startups: str = "10:30:100",
        sftp: bool = True,
        home: Path | None = None,
    ) -> None:
        if SSHD is None:
            pytest.skip("OpenSSH's sshd is not installed (apt-get install openssh-server)")
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.home = home or folder / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.ports = ports or [free_port()]
        self.user = getpass.getuser()
        self.host_key_path = folder / "host_key"
        if not self.host_key_path.exists():
            host_key = asyncssh.generate_private_key("ssh-ed25519")
            self.host_key_path.write_bytes(host_key.export_private_key())
            self.host_key_path.chmod(0o600)
        self.host_key = asyncssh.read_private_key(str(self.host_key_path))
        authorized = folder / "authorized_keys"
        authorized.write_text(client.public)
        listen = "".join(f"ListenAddress 127.0.0.1:{port}\n" for port in self.ports)
        self.config = folder / "sshd_config"
        self.config.write_text(
            listen
            + f"HostKey {self.host_key_path}\n"
            + f"AuthorizedKeysFile {authorized}\n"
            + f"PidFile {folder / 'sshd.pid'}\n"
            + "StrictModes no\nUsePAM no\nPasswordAuthentication no\n"
            + "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
            + "AllowTcpForwarding yes\n"
            + ("Subsystem sftp internal-sftp\n" if sftp else "")
            + f"MaxStartups {max_startups}\nMaxSessions 20\n"
            + f"SetEnv HOME={self.home}\nLogLevel INFO\n"
        )
        self.log = folder / "sshd.log"
        self.process: subprocess.Popen[bytes] | None = None

    def known_hosts_lines(self) -> str:
        public = self.host_key.export_public_key().decode().strip()
        return "".join(f"[127.0.0.1]:{port} {public}\n" for port in self.ports)

    def start(self) -> OpenSshd:
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self.config)], stdout=log, stderr=log
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"sshd exited: {self.log.read_text()[-2000:]}")
            # Read the log rather than probe the ports: a probe is a connection
            # sshd counts against MaxStartups until its child gives up on it.
            said = self.log.read_text(errors="replace")
            if all(f"Server listening on 127.0.0.1 port {port}." in said for port in self.ports):
                return self
            time.sleep(0.02)
        pytest.fail(f"sshd did not listen: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None

    def crash(self) -> None:
        """Die as a node does: the listener and every session it serves, at once."""
        if self.process is None:
            return
        family = _descendants(self.process.pid)
        self.process.kill()
        self.process.wait(10)
        self.process = None
        for pid in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def freeze(self) -> list[int]:
        """Stop answering without closing anything, as a hung node or a cut cable does."""
        assert self.process is not None
        frozen = [self.process.pid, *_descendants(self.process.pid)]
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return frozen

    @staticmethod
    def thaw(frozen: list[int]) -> None:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def logins(self) -> int:
        """How many logins this sshd accepted."""
        return self.log.read_text(errors="replace").count("Accepted publickey")


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found.extend(children)
        frontier.extend(children)
    return found


@pytest.fixture
def openssh(tmp_path: Path, client_key: ClientKey) -> Iterator[list[OpenSshd]]:
    """A list that tests append started sshd's to; every one is stopped afterwards."""
    started: list[OpenSshd] = []
    yield started
    for server in started:
        server.stop()
