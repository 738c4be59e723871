"""One process standing in for many nodes of a simulated fleet (`sim_fleet`).

    python -m llmgw_core.fleet.sim_pool SPEC.json

Each node gets its own SSH server (asyncssh) on its own loopback address,
with its own host key: the console's handshakes, logins and channels are
real. Behind the `serve` command runs the agent's real protocol code
(`llmgw_agent.protocol.Server`, the same operations, facts read from the
node's capture directory) — but in this process, on this server's event
loop and threads, not as one Python process per node: 2,048 agent
processes do not fit a small machine. What that leaves out is each agent's
start-up (one Python start a node, measured in bench_discovery.py).

A node marked `silent` accepts TCP and never says a word: a hung sshd.
A `bastion` entry adds an SSH server that forwards connections (ProxyJump).

It prints one JSON line, `{"ports": {name: port}}`, once everything listens,
and runs until its standard input closes (its parent is gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import asyncssh

from llmgw_core.fleet.loopback import LoopbackSshd


def is_agent_serve(command: str) -> bool:
    """Whether an exec request is the console's `serve` command (`deploy.serve_command`)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return len(words) == 3 and words[:2] == ["/bin/sh", "-c"] and words[2].endswith(" serve")


class _ChannelOut:
    """The agent's `Channel` output, written from any thread onto the SSH channel."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stdout: Any) -> None:
        self._loop = loop
        self._stdout = stdout

    def write(self, data: bytes) -> None:
        try:
            self._loop.call_soon_threadsafe(self._write, data)
        except RuntimeError as exc:  # the loop is closed: the channel is gone
            raise OSError(str(exc)) from None

    def _write(self, data: bytes) -> None:
        with contextlib.suppress(OSError, asyncssh.Error):
            self._stdout.write(data)

    def flush(self) -> None:
        return None


class AgentSshd(LoopbackSshd):
    """A node's SSH server whose `serve` command is the agent's protocol, in this process."""

    def __init__(self, *, capture: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.capture = capture

    async def _run(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        from llmgw_agent.protocol import Channel, Server

        if not is_agent_serve(process.command or ""):
            process.stderr.write(b"this simulated node runs only the llmgw agent\n")
            process.exit(127)
            return
        out = _ChannelOut(asyncio.get_running_loop(), process.stdout)
        server = Server(Channel(out), self.capture)
        server.channel.send(server.hello())
        try:
            while True:
                line = await process.stdin.readline()
                if not line:
                    break
                server.handle_line(line)
        except (asyncssh.Error, OSError):
            pass
        finally:
            server.channel.closed = True
            await asyncio.to_thread(server.shutdown)
        with contextlib.suppress(OSError, asyncssh.Error):
            process.exit(0)


async def _hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A silent node: take the connection, never answer, drop it when the client does."""
    with contextlib.suppress(OSError):
        while await reader.read(65536):
            pass
    writer.close()


async def serve_spec(spec: dict[str, Any]) -> None:
    """Start every server of `spec`, print the ports, run until stdin closes."""
    authorized = str(spec["authorized_keys"])
    ports: dict[str, int] = {}
    sshds: list[LoopbackSshd] = []
    silent: list[asyncio.Server] = []
    for node in spec.get("nodes", []):
        address = str(node["address"])
        if node.get("silent"):
            server = await asyncio.start_server(_hold, address, 0)
            silent.append(server)
            ports[node["name"]] = server.sockets[0].getsockname()[1]
            continue
        sshd = AgentSshd(
            capture=str(node["capture"]),
            home=Path(node["home"]),
            host_key=asyncssh.import_private_key(node["host_key"]),
            authorized_keys=authorized,
        )
        ports[node["name"]] = await sshd.start(address=address)
        sshds.append(sshd)
    bastion = spec.get("bastion")
    if bastion:
        sshd = LoopbackSshd(
            home=Path(bastion["home"]),
            host_key=asyncssh.import_private_key(bastion["host_key"]),
            authorized_keys=authorized,
            allow_forwarding=True,
        )
        ports["bastion"] = await sshd.start(address=str(bastion["address"]))
        sshds.append(sshd)
    sys.stdout.write(json.dumps({"ports": ports}) + "\n")
    sys.stdout.flush()
    await asyncio.to_thread(sys.stdin.read)
    # Nothing on a simulated node outlives it (its agents start no process):
    # the kernel closes every socket at once, the agents' threads just end.
    sys.stdout.flush()
    os._exit(0)


def main(argv: list[str]) -> int:
    """Read the spec file named in argv and serve it."""
    if len(argv) != 1:
        sys.stderr.write("usage: python -m llmgw_core.fleet.sim_pool SPEC.json\n")
        return 2
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    os.environ.setdefault("LLMGW_AGENT_STATE", str(Path(argv[0]).parent / "agent-state"))
    asyncio.run(serve_spec(spec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
