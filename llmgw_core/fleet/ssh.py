"""SSH connections to the nodes, the way the operator's own `ssh` would make them.

The operator's `~/.ssh/config` decides what the inventory leaves open (Host
aliases, HostName, User, Port, IdentityFile, ProxyJump); ssh-agent is used
when it runs. What we decide ourselves, always explicitly:

* host keys are checked against the inventory's `known_hosts` file: an
  unknown or changed key is refused with its SHA256 fingerprint and the
  command that accepts it. Verification is never turned off here.
* every node behind one bastion shares ONE connection to it, so a hundred
  nodes do not mean a hundred handshakes on the bastion (asyncssh's own
  ProxyJump string would open one per target);
* handshakes in flight are bounded, in total, per server address (below
  sshd's `MaxStartups`, 10, from which sshd starts dropping connection
  attempts) and per bastion;
* a node that accepts TCP but never speaks SSH gives its slot back after
  `banner_grace_s` and is given up after `banner_timeout_s`: a few hung
  nodes never hold the fleet's handshakes (the gates live in `gates.py`);
* keepalives notice a dead node in well under a minute, and a timeout
  bounds every connect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncssh

from llmgw_core.errors import LlmgwError
from llmgw_core.fleet.gates import (
    DIALS_AHEAD,
    BannerTimeout,
    ConnectStats,
    DialledStream,
    Gates,
    open_with_banner,
)
from llmgw_core.fleet.lag import LoopLag

if TYPE_CHECKING:
    from llmgw_core.inventory import NodeSpec

MAX_STARTUPS_PER_SERVER = 8
"""Handshakes in flight per server address.

sshd's default `MaxStartups 10:30:100` drops 30 % of new attempts once 10
are unauthenticated, and sshd learns of a finished login a moment after the
client does: 8 leaves that moment (and another client or two) some room.
"""

PREFERRED_CIPHERS = (b"aes128-gcm@openssh.com", b"aes256-gcm@openssh.com")
"""Offered first unless ~/.ssh/config names `Ciphers`: AES-GCM runs on the CPU's AES
instructions in one call a packet, where asyncssh's chacha20-poly1305 (its default
first choice) builds three cipher objects a packet — about five times the CPU, paid
twice for a node behind a bastion. OpenSSH servers accept both; the rest of
asyncssh's defaults follow, for servers that lack them."""

MAX_HANDSHAKES_PER_BASTION = 10
"""Node handshakes in flight through one bastion connection (its sshd's
`MaxStartups` does not count them, but its CPU and its forwarding do)."""


class Unreachable(LlmgwError):
    """A node could not be reached or logged into (network, sshd down, auth)."""


class HostKeyRefused(LlmgwError):
    """A node presented a host key that known_hosts does not trust."""


@dataclass(frozen=True)
class SshTarget:
    """Where one node is, as the inventory says it (None = let ~/.ssh/config decide).

    Attributes:
        node: the inventory name, used in every sentence about this node.
        host: a host name, an address or a Host alias of ~/.ssh/config.
    """

    node: str
    host: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None

    @classmethod
    def of(cls, spec: NodeSpec, *, node: str | None = None) -> SshTarget:
        """Where an inventory `NodeSpec` says its node is (`node`: the name to say instead)."""
        return cls(
            node=node or spec.name,
            host=spec.host,
            port=spec.port,
            user=spec.user,
            identity_file=spec.identity_file,
        )


@dataclass(frozen=True)
class SshSettings:
    """How connections are made; the defaults are the operator's real setup.

    Attributes:
        known_hosts: the file host keys are verified against.
        config_paths: OpenSSH client config files; None reads `~/.ssh/config`
            when it exists, an empty tuple reads none.
        client_keys: keys to offer instead of the identity files and ssh-agent
            (the demo fleet passes its generated key).
        use_ssh_agent: offer the keys ssh-agent holds (when SSH_AUTH_SOCK is set).
    """

    known_hosts: Path
    config_paths: tuple[Path, ...] | None = None
    client_keys: tuple[Any, ...] | None = None
    use_ssh_agent: bool = True
    connect_timeout_s: float = 15.0
    keepalive_interval_s: float = 15.0
    keepalive_count_max: int = 3
    max_handshakes: int = 32
    max_handshakes_per_server: int = MAX_STARTUPS_PER_SERVER
    max_handshakes_per_bastion: int = MAX_HANDSHAKES_PER_BASTION
    banner_grace_s: float = 1.0
    banner_timeout_s: float = 10.0
    accept_command: str = "llmgw-tui --accept-host"


@dataclass
class _Resolved:
    """A target after ~/.ssh/config: where the TCP connection really goes."""

    options: asyncssh.SSHClientConnectionOptions
    host: str
    port: int
    jump: str | None
    shown: str = field(default="")


def fingerprint(key: asyncssh.SSHKey) -> str:
    """`ssh-ed25519 SHA256:…`, the way `ssh` prints a host key."""
    return f"{key.get_algorithm()} {key.get_fingerprint('sha256')}"


def known_hosts_name(host: str, port: int) -> str:
    """The name a host is listed under in known_hosts (`[host]:port` off port 22)."""
    return host if port == 22 else f"[{host}]:{port}"


class SshConnector:
    """Opens verified connections to nodes, sharing bastions and bounding handshakes."""

    def __init__(self, settings: SshSettings) -> None:
        self.settings = settings
        self.stats = ConnectStats()
        """Handshakes in flight now and at most, nodes that never sent a banner."""
        self._handshakes = asyncio.Semaphore(settings.max_handshakes)
        self._dials = asyncio.Semaphore(settings.max_handshakes * DIALS_AHEAD)
        self._per_server: dict[tuple[str, str | None], asyncio.Semaphore] = {}
        self._per_bastion: dict[str, asyncio.Semaphore] = {}
        self._dials_per_bastion: dict[str, asyncio.Semaphore] = {}
        self._jumps: dict[str, asyncio.Task[asyncssh.SSHClientConnection]] = {}
        self._jump_lock = asyncio.Lock()
        self._known_hosts_cache: tuple[tuple[int, int], asyncssh.SSHKnownHosts] | None = None
        self.lag = LoopLag()
        """The console loop's lateness, left out of the connect and banner timeouts."""

    def _config(self) -> Sequence[str] | None:
        paths = self.settings.config_paths
        if paths is None:
            default = Path("~/.ssh/config").expanduser()
            return [str(default)] if default.is_file() else None
        return [str(path) for path in paths] or None

    def _known_hosts(self) -> asyncssh.SSHKnownHosts:
        """Read again whenever the file changed, so a key accepted a moment ago counts.

        Parsed once per change, not once per connect: a big fleet's file,
        parsed per connect, costs in proportion to the fleet for every node.
        """
        try:
            stat = self.settings.known_hosts.stat()
            version = (stat.st_mtime_ns, stat.st_size)
            cached = self._known_hosts_cache
            if cached is not None and cached[0] == version:
                return cached[1]
            text = self.settings.known_hosts.read_text(encoding="utf-8")
        except FileNotFoundError:
            return asyncssh.import_known_hosts("")
        except OSError as exc:
            raise Unreachable(
                f"cannot read known_hosts {self.settings.known_hosts}: {exc.strerror or exc}"
            ) from None
        parsed = asyncssh.import_known_hosts(text)
        self._known_hosts_cache = (version, parsed)
        return parsed

    async def _resolve(
        self, host: str, port: int | None, user: str | None, identity_file: str | None
    ) -> _Resolved:
        """Apply ~/.ssh/config to a target, the way `ssh` would."""
        kwargs: dict[str, Any] = {
            "config": self._config(),
            "host": host,
            "known_hosts": self._known_hosts(),
            # Timed in `_open` instead, without the console's own lateness (`lag.py`).
            "connect_timeout": None,
            "keepalive_interval": self.settings.keepalive_interval_s,
            "keepalive_count_max": self.settings.keepalive_count_max,
        }
        if port is not None:
            kwargs["port"] = port
        if user is not None:
            kwargs["username"] = user
        if self.settings.client_keys is not None:
            kwargs["client_keys"] = list(self.settings.client_keys)
        elif identity_file is not None:
            kwargs["client_keys"] = [identity_file]
        if not self.settings.use_ssh_agent:
            kwargs["agent_path"] = None
        construct = asyncssh.SSHClientConnectionOptions.construct
        try:
            if _may_name_ciphers(kwargs["config"] or ()):
                options = await construct(**kwargs)
                if list(options.encryption_algs) == _defaults():  # not for this host
                    options = await construct(**kwargs, encryption_algs=_gcm_first())
            else:
                options = await construct(**kwargs, encryption_algs=_gcm_first())
        except (OSError, ValueError, asyncssh.Error) as exc:
            raise Unreachable(f"cannot prepare the connection to {host}: {exc}") from None
        jump = options.tunnel if isinstance(options.tunnel, str) else None
        if jump is not None and jump.strip().lower() == "none":
            jump = None
        return _Resolved(
            options=options,
            host=options.host,
            port=options.port,
            jump=jump,
            shown=f"{options.host}:{options.port}",
        )

    def _server_gate(self, resolved: _Resolved) -> asyncio.Semaphore:
        # By address, not port: several ports of one address may be one sshd,
        # and MaxStartups counts per sshd.
        key = (resolved.host, resolved.jump)
        if key not in self._per_server:
            self._per_server[key] = asyncio.Semaphore(self.settings.max_handshakes_per_server)
        return self._per_server[key]

    async def connect(self, target: SshTarget) -> asyncssh.SSHClientConnection:
        """A logged-in, host-verified connection to one node.

        Raises:
            HostKeyRefused: the node's host key is unknown or changed.
            Unreachable: anything else that kept us from logging in, in one sentence.
        """
        resolved = await self._resolve(target.host, target.port, target.user, target.identity_file)
        return await self._open(target.node, resolved)

    def _gates(self, resolved: _Resolved) -> tuple[Gates, Gates]:
        """The gates of the dial (and banner) and those of the handshake, taken in that order."""
        dial = [self._dials]
        handshake = [self._handshakes]
        if resolved.jump:
            if resolved.jump not in self._per_bastion:
                limit = self.settings.max_handshakes_per_bastion
                self._per_bastion[resolved.jump] = asyncio.Semaphore(limit)
                self._dials_per_bastion[resolved.jump] = asyncio.Semaphore(limit * DIALS_AHEAD)
            dial.append(self._dials_per_bastion[resolved.jump])
            handshake.append(self._per_bastion[resolved.jump])
        dial.append(self._server_gate(resolved))
        return (
            Gates(dial, self.stats, counted=False),
            Gates(handshake, self.stats),
        )

    async def _open(self, name: str, resolved: _Resolved) -> asyncssh.SSHClientConnection:
        via = await self._jump(resolved.jump) if resolved.jump else None
        where = resolved.shown + (f" via {resolved.jump}" if resolved.jump else "")
        dial_gates, handshake_gates = self._gates(resolved)
        async with dial_gates:
            try:
                tunnel: Any = via if via is not None else ()
                if not resolved.options.proxy_command:
                    # Dial first and wait for the banner; a silent node lets its slot go.
                    tunnel = await open_with_banner(
                        via,
                        resolved.host,
                        resolved.port,
                        dial_gates,
                        grace_s=self.settings.banner_grace_s,
                        timeout_s=self.settings.banner_timeout_s,
                        lag=self.lag,
                    )
                try:
                    async with handshake_gates:  # untimed: waiting for a slot is not the node's
                        return await self.lag.wait_for(
                            asyncssh.connect(
                                resolved.host,
                                resolved.port,
                                tunnel=tunnel,
                                options=resolved.options,
                            ),
                            self.settings.connect_timeout_s,
                        )
                except BaseException:
                    if isinstance(tunnel, DialledStream):
                        tunnel.abort()  # dialled, never logged in (or cancelled while waiting)
                    raise
            except BannerTimeout as exc:
                raise Unreachable(f"{name} ({where}) {exc}", exc.fix) from None
            except asyncssh.HostKeyNotVerifiable:
                raise await self._host_key_refusal(name, resolved, via) from None
            except asyncssh.PermissionDenied:
                raise Unreachable(
                    f"{name} ({where}) refused the login of user {resolved.options.username!r}",
                    "check the user and the key (identity_file, ssh-agent) for this node",
                ) from None
            except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
                raise Unreachable(f"{name} ({where}) cannot be reached: {_reason(exc)}") from None

    async def _jump(self, spec: str) -> asyncssh.SSHClientConnection:
        """One shared connection per bastion chain (`a,b` = b reached through a)."""
        async with self._jump_lock:
            task = self._jumps.get(spec)
            if task is not None and task.done():
                failed = task.cancelled() or task.exception() is not None
                if failed or task.result().is_closed():
                    task = None
            if task is None:
                task = asyncio.ensure_future(self._open_jump(spec))
                self._jumps[spec] = task
        try:
            return await asyncio.shield(task)
        except HostKeyRefused as exc:
            raise HostKeyRefused(f"through the bastion {spec}: {exc.message}", exc.fix) from None
        except LlmgwError as exc:
            raise Unreachable(f"the bastion {spec} cannot be reached: {exc.sentence()}") from None

    async def _open_jump(self, spec: str) -> asyncssh.SSHClientConnection:
        hops = [hop.strip() for hop in spec.split(",") if hop.strip()]
        *before, last = hops
        user, host, port = _parse_hop(last)
        resolved = await self._resolve(host, port, user, None)
        if before:
            resolved.jump = ",".join(before)
        return await self._open(last, resolved)

    async def _host_key_refusal(
        self, name: str, resolved: _Resolved, via: asyncssh.SSHClientConnection | None
    ) -> HostKeyRefused:
        listed = known_hosts_name(resolved.host, resolved.port)
        file = self.settings.known_hosts
        fix = f"check it out of band, then run `{self.settings.accept_command} {name}`"
        try:
            key = await asyncssh.get_server_host_key(
                resolved.host, resolved.port, tunnel=via if via is not None else ()
            )
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            return HostKeyRefused(
                f"{name} ({listed}) presented a host key that {file} does not trust, "
                f"and fetching it again failed: {_reason(exc)}",
                fix,
            )
        shown = fingerprint(key) if key is not None else "an unknown key"
        trusted, *_ = self._known_hosts().match(resolved.host, "", resolved.port)
        if trusted:
            return HostKeyRefused(
                f"the host key of {name} ({listed}) CHANGED: it now presents {shown}, "
                f"which {file} does not list for it",
                fix,
            )
        return HostKeyRefused(
            f"{name} ({listed}) presents the unknown host key {shown}, not listed in {file}",
            fix,
        )

    async def fetch_host_key(self, target: SshTarget) -> tuple[asyncssh.SSHKey, str, int]:
        """The key a node presents now, and the host and port it is listed under.

        Raises:
            Unreachable: the node (or its bastion) cannot be reached.
        """
        resolved = await self._resolve(target.host, target.port, target.user, target.identity_file)
        via = await self._jump(resolved.jump) if resolved.jump else None
        return await self._presented_key(target.node, resolved, via)

    async def bastions_of(self, target: SshTarget) -> list[str]:
        """The ProxyJump hops in front of a node, outermost first (`[]` when direct)."""
        resolved = await self._resolve(target.host, target.port, target.user, target.identity_file)
        return [hop.strip() for hop in (resolved.jump or "").split(",") if hop.strip()]

    async def fetch_bastion_key(
        self, hops: list[str], index: int
    ) -> tuple[asyncssh.SSHKey, str, int]:
        """The key the bastion `hops[index]` presents, reached through the hops before it."""
        user, host, port = _parse_hop(hops[index])
        resolved = await self._resolve(host, port, user, None)
        via = await self._jump(",".join(hops[:index])) if index else None
        return await self._presented_key(hops[index], resolved, via)

    async def _presented_key(
        self, name: str, resolved: _Resolved, via: asyncssh.SSHClientConnection | None
    ) -> tuple[asyncssh.SSHKey, str, int]:
        try:
            key = await asyncssh.get_server_host_key(
                resolved.host, resolved.port, tunnel=via if via is not None else ()
            )
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            raise Unreachable(
                f"{name} ({resolved.shown}) cannot be reached: {_reason(exc)}"
            ) from None
        if key is None:
            raise Unreachable(f"{name} ({resolved.shown}) presented no host key")
        return key, resolved.host, resolved.port

    async def close(self) -> None:
        """Close the shared bastion connections."""
        tasks = list(self._jumps.values())
        self._jumps.clear()
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is None:
                connection = task.result()
                connection.close()
                await connection.wait_closed()
            elif not task.done():
                task.cancel()
        await self.lag.close()


def _defaults() -> list[bytes]:
    from asyncssh.encryption import get_default_encryption_algs

    return list(get_default_encryption_algs())


def _gcm_first() -> list[str]:
    """asyncssh's default ciphers with `PREFERRED_CIPHERS` first."""
    defaults = _defaults()
    preferred = [alg for alg in PREFERRED_CIPHERS if alg in defaults]
    return [alg.decode() for alg in preferred + [a for a in defaults if a not in preferred]]


def _may_name_ciphers(paths: Sequence[str]) -> bool:
    """Whether an ssh config file may set `Ciphers` (it says so, or includes other files).

    Only then are the options parsed twice (to see whether this host's
    ciphers were chosen), since each parse is paid per node.
    """
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            word = line.strip().split(maxsplit=1)[0].lower() if line.strip() else ""
            if word.startswith(("ciphers", "include")):
                return True
    return False


def _parse_hop(hop: str) -> tuple[str | None, str, int | None]:
    user, _, rest = hop.rpartition("@")
    host, port = rest, None
    if rest.count(":") == 1:
        host, port_text = rest.split(":")
        port = int(port_text) if port_text.isdigit() else None
    return (user or None), host, port


def _reason(exc: BaseException) -> str:
    """A short cause for a failed connection, without a traceback."""
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is sshd running?)"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    if isinstance(exc, asyncssh.DisconnectError):
        return exc.reason or type(exc).__name__
    return str(exc) or type(exc).__name__
