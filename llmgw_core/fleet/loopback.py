"""An SSH server on 127.0.0.1 that stands in for one node (the demo fleet, the tests).

It is asyncssh's server with what a node's sshd gives the console: public-key
login, `exec` of real commands as real subprocesses (in the node's own home,
with the node's own environment), SFTP rooted at that home for relative
paths, and — when asked — forwarding, so it can serve as a bastion. Nothing
in it is simulated: the agent that runs behind it is the real one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
from pathlib import Path
from typing import Any

import asyncssh

from llmgw_core.cancelling import cancel_and_wait

_PUMP_CHUNK = 65536
_KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TMPDIR")
"""What a node on loopback keeps of the environment it was started in. Not
`PYTHONDONTWRITEBYTECODE`: a real node's login never inherits the operator's, and with it
every agent start compiled the agent again (its folder beside the zipapp is never made):
about 60 ms of CPU a node each time a console connects."""
SIM_ENV_PREFIX = "LLMGW_SIM_"
"""The simulated engines' knobs (`LLMGW_SIM_LOAD_S`, `LLMGW_SIM_TOKEN_S`, …): a node on
loopback keeps them from the environment it was started in, so a demo started with one
simulates with it."""


class _HomeSftp(asyncssh.SFTPServer):
    """SFTP where relative paths start at the node's home, as with OpenSSH."""

    def __init__(self, chan: asyncssh.SSHServerChannel, *, home: bytes) -> None:
        super().__init__(chan)
        self._home = home

    def map_path(self, path: bytes) -> bytes:
        if not path.startswith(b"/"):
            path = self._home + b"/" + path
        return super().map_path(path)


class _Server(asyncssh.SSHServer):
    """Tracks connections (to drop them on stop) and allows forwarding for bastions."""

    def __init__(self, owner: LoopbackSshd) -> None:
        self._owner = owner
        self._connection: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._connection = conn
        self._owner.connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connection is not None:
            self._owner.connections.discard(self._connection)

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int):
        return self._owner.allow_forwarding


class LoopbackSshd:
    """One node's SSH server: start it, read `.port`, stop it (and everything it ran).

    Attributes:
        home: the node's home directory (commands run there, `HOME` points there).
        env: extra environment for every command (e.g. `LLMGW_AGENT_REPLAY`).
        host_key: the node's private host key; its public half goes into known_hosts.
    """

    def __init__(
        self,
        *,
        home: Path,
        host_key: asyncssh.SSHKey,
        authorized_keys: str,
        env: dict[str, str] | None = None,
        allow_forwarding: bool = False,
    ) -> None:
        self.home = home
        self.host_key = host_key
        self.authorized_keys = authorized_keys
        self.env = dict(env or {})
        self.allow_forwarding = allow_forwarding
        self.port = 0
        self.address = "127.0.0.1"
        self.connections: set[asyncssh.SSHServerConnection] = set()
        self.process_groups: set[int] = set()
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    def known_hosts_line(self) -> str:
        """This server's line for a known_hosts file."""
        public = self.host_key.export_public_key().decode().strip()
        return f"[{self.address}]:{self.port} {public}"

    async def start(self, port: int = 0, address: str = "127.0.0.1") -> int:
        """Listen on a loopback `address` (`port` 0 = a free one); returns the port."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.address = address
        self._acceptor = await asyncssh.listen(
            address,
            port,
            server_host_keys=[self.host_key],
            authorized_client_keys=asyncssh.import_authorized_keys(self.authorized_keys),
            server_factory=functools.partial(_Server, self),
            process_factory=self._handle,
            sftp_factory=functools.partial(_HomeSftp, home=os.fsencode(self.home)),
            encoding=None,
            allow_scp=False,
            x11_forwarding=False,
            agent_forwarding=False,
            keepalive_interval=0,
        )
        self.port = self._acceptor.get_port()
        return self.port

    def _command_env(self) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if key in _KEPT_ENV or key.startswith(SIM_ENV_PREFIX)
        }
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update({"HOME": str(self.home), "USER": os.environ.get("USER", "llmgw")})
        env.update(self.env)
        return env

    async def _handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await self._run(process)
        finally:
            if task is not None:
                self._handlers.discard(task)

    async def _run(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        """Run the requested command as a real subprocess, piping bytes both ways.

        The exit status is sent only after both output streams reached end of
        file: exiting earlier races the pumps and tears the connection down.
        """
        command = process.command or "sh"
        child = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.home,
            env=self._command_env(),
            start_new_session=True,
        )
        self.process_groups.add(child.pid)
        feeder = asyncio.ensure_future(self._feed(process, child))
        try:
            await asyncio.gather(
                _pump(child.stdout, process.stdout), _pump(child.stderr, process.stderr)
            )
            status = await child.wait()
        finally:
            await cancel_and_wait(feeder)
            if child.returncode is None:
                _signal_group(child.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(child.wait(), 2.0)
                except asyncio.TimeoutError:
                    _signal_group(child.pid, signal.SIGKILL)
                    await child.wait()
            self.process_groups.discard(child.pid)
        with contextlib.suppress(OSError, asyncssh.Error):
            process.exit(status)

    async def _feed(
        self, process: asyncssh.SSHServerProcess[bytes], child: asyncio.subprocess.Process
    ) -> None:
        assert child.stdin is not None
        try:
            while True:
                chunk = await process.stdin.read(_PUMP_CHUNK)
                if not chunk:
                    break
                child.stdin.write(chunk)
                await child.stdin.drain()
        except (asyncssh.BreakReceived, asyncssh.TerminalSizeChanged, asyncssh.Error, OSError):
            pass
        finally:
            with contextlib.suppress(OSError):
                child.stdin.close()

    async def stop(self) -> None:
        """Stop listening, drop every connection and end every command it ran."""
        if self._acceptor is not None:
            self._acceptor.close()
            with contextlib.suppress(OSError, asyncssh.Error):
                await self._acceptor.wait_closed()
            self._acceptor = None
        for connection in list(self.connections):
            connection.close()
        for pgid in list(self.process_groups):
            _signal_group(pgid, signal.SIGTERM)
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=5.0)
        for pgid in list(self.process_groups):
            _signal_group(pgid, signal.SIGKILL)
        self.connections.clear()


async def _pump(source: asyncio.StreamReader | None, sink: Any) -> None:
    assert source is not None
    while True:
        chunk = await source.read(_PUMP_CHUNK)
        if not chunk:
            return
        with contextlib.suppress(OSError, asyncssh.Error):
            sink.write(chunk)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
