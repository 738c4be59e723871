"""One process standing in for many nodes of a simulated fleet (`sim_fleet`).

    python -m llmgw_core.fleet.sim.pool SPEC.json

Each node gets its own SSH server (asyncssh) on its own loopback address,
with its own host key: the console's handshakes, logins and channels are
real. Behind the `serve` command runs the agent's real protocol code
(`llmgw_agent.protocol.Server`, the same operations, facts read from the
node's capture directory) — but in this process, on this server's event
loop and threads, not as one Python process per node: 2,048 agent
processes do not fit a small machine. What that leaves out is each agent's
start-up (one Python start a node, measured in bench_discovery.py).

Nodes of one kind share one capture (`sim_fleet.write_captures`), so their
facts are read from it once per kind and `FACTS_KEPT_S` (`KindFacts`); each
node's answer is that shared reading with its own `host.json` laid over it.
Each kind is read once while the pool starts, before it says it listens.
On a real cluster every node parses its own hardware on its own CPU, in
parallel with the others; here that parsing (1,352 H100 nodes of one
capture, 504 trays of their own) would run on the CPUs the console needs.

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
import threading
import time
from pathlib import Path
from typing import Any

import asyncssh

from llmgw_core.fleet.loopback import LoopbackSshd

FACTS_KEPT_S = 30.0
"""How long one kind's facts are shared before they are read again: half the
console's refresh interval, so what changes (rail verdicts, simulated usage,
mounts) is seen at the next refresh but one at the latest."""


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


class KindFacts:
    """The facts of each kind of node, read once and shared for `kept_s` from their first use."""

    def __init__(self, kept_s: float = FACTS_KEPT_S) -> None:
        self.kept_s = kept_s
        self.reads = 0
        """How many times a capture was really read (the rest were shared)."""
        self._lock = threading.Lock()
        self._kinds: dict[tuple[str, str], tuple[float | None, dict[str, Any]]] = {}
        self._reading: dict[tuple[str, str], threading.Lock] = {}

    def _key_lock(self, kind: str, args: dict[str, Any]) -> tuple[tuple[str, str], threading.Lock]:
        key = (kind, json.dumps(args, sort_keys=True))
        with self._lock:
            return key, self._reading.setdefault(key, threading.Lock())

    def read_ahead(self, kind: str, args: dict[str, Any], read: Any) -> None:
        """Read a kind's facts now; they are kept from the moment a node first asks."""
        key, reading = self._key_lock(kind, args)
        with reading:
            if key not in self._kinds:
                self._kinds[key] = (None, read())
                self.reads += 1

    def facts(self, kind: str, capture: str, args: dict[str, Any], read: Any) -> dict[str, Any]:
        """This node's facts: its kind's (read by `read()` when none are fresh), its own host."""
        key, reading = self._key_lock(kind, args)
        with reading:  # one read per kind at a time; the others wait for it
            now = time.monotonic()
            kept = self._kinds.get(key)
            if kept is not None and kept[0] is None:
                kept = (now, kept[1])  # read ahead: kept from its first use
                self._kinds[key] = kept
            if kept is None or kept[0] is None or now - kept[0] > self.kept_s:
                kept = (now, read())
                self._kinds[key] = kept
                self.reads += 1
        return own_facts(kept[1], capture)


def own_facts(shared: dict[str, Any], capture: str) -> dict[str, Any]:
    """`shared` facts (of a node of the same kind) as the node of `capture` reports them.

    Nodes of one kind differ only in their `host.json` (name, management
    address) and in where their capture lies; the rest is the same reading.
    """
    from llmgw_agent.discover.host import read_host_json

    own = read_host_json(Path(capture) / "host.json")
    facts = dict(shared)
    host = dict(shared.get("host") or {})
    host.update({key: value for key, value in own.items() if key in host and value is not None})
    facts["host"] = host
    facts["source"] = f"replay:{capture}"
    return facts


class _Nowhere:
    """The output of a server that only reads facts ahead (nobody is connected)."""

    def write(self, data: bytes) -> None:
        return None

    def flush(self) -> None:
        return None


def _sim_server(capture: str, kind: str | None, shared: KindFacts, out: Any) -> Any:
    """The agent's protocol `Server` for one node, its facts shared with its kind."""
    from llmgw_agent.ops import Op
    from llmgw_agent.protocol import Channel, Server

    server = Server(Channel(out), capture)
    if kind is not None:
        read = server.ops[Op.FACTS]

        def facts(args: dict[str, Any], stream: Any) -> dict[str, Any]:
            return shared.facts(kind, capture, args, lambda: read(args, stream))

        server.ops[Op.FACTS] = facts
    return server


class AgentSshd(LoopbackSshd):
    """A node's SSH server whose `serve` command is the agent's protocol, in this process."""

    def __init__(
        self,
        *,
        capture: str,
        kind: str | None = None,
        shared: KindFacts | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.capture = capture
        self.kind = kind
        self.shared = shared or KindFacts()

    def read_ahead(self, args: dict[str, Any]) -> None:
        """Read this node's kind's facts now (the console's request will find them)."""
        from llmgw_agent.ops import Op
        from llmgw_agent.protocol import Channel, Server, Stream

        if self.kind is None:
            return
        server = Server(Channel(_Nowhere()), self.capture)
        stream = Stream(None, server.channel, server.connection)
        read = server.ops[Op.FACTS]
        self.shared.read_ahead(self.kind, args, lambda: read(args, stream))

    async def _run(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        if not is_agent_serve(process.command or ""):
            process.stderr.write(b"this simulated node runs only the llmgw agent\n")
            process.exit(127)
            return
        out = _ChannelOut(asyncio.get_running_loop(), process.stdout)
        server = _sim_server(self.capture, self.kind, self.shared, out)
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
    shared = KindFacts()
    for node in spec.get("nodes", []):
        address = str(node["address"])
        if node.get("silent"):
            server = await asyncio.start_server(_hold, address, 0)
            silent.append(server)
            ports[node["name"]] = server.sockets[0].getsockname()[1]
            continue
        sshd = AgentSshd(
            capture=str(node["capture"]),
            kind=node.get("kind"),
            shared=shared,
            home=Path(node["home"]),
            host_key=asyncssh.import_private_key(node["host_key"]),
            authorized_keys=authorized,
        )
        ports[node["name"]] = await sshd.start(address=address)
        sshds.append(sshd)
        # What the console's discovery asks of a node of the inventory sim_fleet writes.
        await asyncio.to_thread(sshd.read_ahead, {"model_dirs": []})
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
        sys.stderr.write("usage: python -m llmgw_core.fleet.sim.pool SPEC.json\n")
        return 2
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    os.environ.setdefault("LLMGW_AGENT_STATE", str(Path(argv[0]).parent / "agent-state"))
    asyncio.run(serve_spec(spec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
