"""The front's client connections: how many it holds, by whom, and which is closed for room.

The front's port is the one thing on the node anyone may reach, so no crowd
of connections may hold the front's file descriptors for long before it has
shown a key (the requests themselves are read within limits by `http.py`):

* `Governor` counts connections by peer address. At a cap, the oldest
  connection that has not yet sent an authenticated head is closed to make
  room (a slowloris defence: a crowd of half-sent connections, even from the
  client's own address, cannot lock a keyed client out); authenticated ones
  are kept.
* `serve_connections` accepts by itself, so that a TLS handshake counts as part
  of the head (the connection is governed from its accept on) and an accept
  that fails for want of descriptors evicts and backs off instead of spinning.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import ssl

from llmgw_agent.front.http import MAX_HEAD_BYTES, Limits

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Awaitable, Callable, Dict, List, Optional, Set, Tuple  # noqa: F401 (type comments)

FD_RESERVE = 64
"""Descriptors kept out of the connection cap: stdio, the listeners, the control socket, health
checks, the event loop's own."""
MIN_CONNECTIONS = 8
MAX_CONNECTIONS_CEILING = 8192
"""The most connections a front holds whatever its open-file limit (each costs memory)."""
ACCEPT_BACKOFF_S = 0.01
ACCEPT_BACKOFF_MAX_S = 1.0

_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def connection_caps(limits: Limits, open_files: int) -> Tuple[int, int]:
    """(connections in all, connections per peer address) for an open-file limit.

    Each client connection may hold one connection to an engine, so half of
    what `FD_RESERVE` leaves goes to clients; a peer may take half of those.
    """
    derived = max(MIN_CONNECTIONS, min(MAX_CONNECTIONS_CEILING, (open_files - FD_RESERVE) // 2))
    total = limits.max_connections or derived
    per_peer = limits.max_connections_per_peer or max(1, total // 2)
    return total, min(per_peer, total)


def open_file_limit() -> int:
    """The process's open-file limit, its soft limit raised first towards the hard one (as far
    as the connection ceiling can use), as servers do at start."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    useful = 2 * MAX_CONNECTIONS_CEILING + FD_RESERVE
    target = useful if hard == resource.RLIM_INFINITY else min(hard, useful)
    if soft == resource.RLIM_INFINITY:
        return useful
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft  # a hard limit this process may not use: the soft one stands
        return target
    return soft


class Slot:
    """One client connection the front holds: its peer, whether it showed a key, its task."""

    __slots__ = ("authenticated", "governor", "held", "peer", "sock", "started", "task")

    def __init__(self, peer: str, sock: socket.socket, governor: Governor) -> None:
        self.governor = governor
        self.peer = peer
        self.authenticated = False
        self.held = True
        self.started = False
        self.sock = sock
        self.task = None  # type: Optional[asyncio.Task]

    def trust(self) -> None:
        """The connection sent an authenticated head: it is kept from now on, never evicted."""
        self.governor.authenticate(self)

    def close(self) -> None:
        """End the connection now (it was evicted)."""
        if self.task is not None:
            self.task.cancel()
        if not self.started:
            self.sock.close()  # a task cancelled before its first step runs no `finally`


class Governor:
    """Every client connection by peer address, and which may be closed to make room.

    Connections not yet authenticated are kept oldest first (dicts keep their
    insertion order), in all and per peer, so the eviction is O(1).
    """

    def __init__(self, max_connections: int, max_per_peer: int) -> None:
        self.max_connections = max_connections
        self.max_per_peer = max_per_peer
        self.connections = 0
        self._per_peer = {}  # type: Dict[str, int]
        self._waiting = {}  # type: Dict[Slot, None]
        self._waiting_by_peer = {}  # type: Dict[str, Dict[Slot, None]]

    def admit(self, peer: str, sock: socket.socket) -> Tuple[Optional[Slot], List[Slot]]:
        """A slot for a new connection from `peer` (None when every connection in the way is
        authenticated) and the slots evicted to make room, for the caller to close."""
        evicted = []  # type: List[Slot]
        if self._per_peer.get(peer, 0) >= self.max_per_peer:
            victim = next(iter(self._waiting_by_peer.get(peer, ())), None)
            if victim is None:
                return None, evicted
            self.release(victim)
            evicted.append(victim)
        if self.connections >= self.max_connections:
            victim = self.oldest_waiting()
            if victim is None:
                return None, evicted
            self.release(victim)
            evicted.append(victim)
        slot = Slot(peer, sock, self)
        self.connections += 1
        self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
        self._waiting[slot] = None
        self._waiting_by_peer.setdefault(peer, {})[slot] = None
        return slot, evicted

    def oldest_waiting(self) -> Optional[Slot]:
        """The oldest connection that has not sent an authenticated head, if any."""
        return next(iter(self._waiting), None)

    def authenticate(self, slot: Slot) -> None:
        """`slot` sent an authenticated head: it is kept from now on."""
        slot.authenticated = True
        self._forget_waiting(slot)

    def release(self, slot: Slot) -> None:
        """`slot` is closed (or about to be); idempotent."""
        if not slot.held:
            return
        slot.held = False
        self._forget_waiting(slot)
        self.connections -= 1
        count = self._per_peer[slot.peer] - 1
        if count:
            self._per_peer[slot.peer] = count
        else:
            del self._per_peer[slot.peer]

    def _forget_waiting(self, slot: Slot) -> None:
        self._waiting.pop(slot, None)
        of_peer = self._waiting_by_peer.get(slot.peer)
        if of_peer is not None:
            of_peer.pop(slot, None)
            if not of_peer:
                del self._waiting_by_peer[slot.peer]


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host:port` (IPv4 or IPv6, as `host` resolves).

    Raises:
        OSError: the address does not resolve or cannot be bound.
    """
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    listener = socket.create_server((host, port), family=family, backlog=1024)
    listener.setblocking(False)
    return listener


async def serve_connections(
    listener: socket.socket,
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter, Slot], Awaitable[None]],
    governor: Governor,
    limits: Limits,
    context: Optional[ssl.SSLContext],
    count: Callable[[str], None],
) -> None:
    """Accept on `listener` forever, each connection in a task of its own under `governor`.

    Args:
        handle: serves one connection's requests (the writer closed after it).
        count: called with `evicted` or `busy` for each connection closed to
            make room or refused for want of any.
    """
    loop = asyncio.get_running_loop()
    backoff_s = ACCEPT_BACKOFF_S
    # The loop holds tasks weakly: a connection waiting on an engine is otherwise reachable
    # from nothing once it is authenticated, and the collector destroys it mid-request.
    running = set()  # type: Set[asyncio.Task]
    while True:
        try:
            sock, address = await loop.sock_accept(listener)
        except OSError as exc:
            if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                continue
            if exc.errno not in _RESOURCE_ERRNOS:
                raise
            # Out of descriptors: close the oldest unauthenticated connection and wait a
            # little, rather than retrying an accept that fails at once, forever.
            victim = governor.oldest_waiting()
            if victim is not None:
                governor.release(victim)
                victim.close()
                count("evicted")
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, ACCEPT_BACKOFF_MAX_S)
            continue
        backoff_s = ACCEPT_BACKOFF_S
        sock.setblocking(False)
        # Each write goes out at once (a stream's chunks, its last `\r\n`): asyncio sets this
        # only on sockets whose protocol number says TCP, and an accepted one's says 0, so a
        # kept-alive client's stream ended a delayed ACK (40 ms) late.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        slot, evicted = governor.admit(str(address[0]), sock)
        for victim in evicted:
            victim.close()
            count("evicted")
        if slot is None:
            sock.close()
            count("busy")
        else:
            slot.task = loop.create_task(_connection(slot, handle, governor, limits, context))
            running.add(slot.task)
            slot.task.add_done_callback(running.discard)
        await asyncio.sleep(0)  # let the connections run between accepts of a burst


async def _connection(
    slot: Slot,
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter, Slot], Awaitable[None]],
    governor: Governor,
    limits: Limits,
    context: Optional[ssl.SSLContext],
) -> None:
    loop = asyncio.get_running_loop()
    transport = None  # type: Optional[asyncio.BaseTransport]
    slot.started = True
    try:
        reader = asyncio.StreamReader(limit=MAX_HEAD_BYTES)
        protocol = asyncio.StreamReaderProtocol(reader)
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol,
            slot.sock,
            ssl=context,
            ssl_handshake_timeout=limits.head_timeout_s if context is not None else None,
        )
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        await handle(reader, writer, slot)
    except asyncio.CancelledError:
        if transport is not None:
            transport.abort()  # evicted: its descriptor is wanted now, not after a flush
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
        pass  # the client went, or its handshake failed or took too long
    finally:
        governor.release(slot)
        if transport is None:
            slot.sock.close()
        elif not transport.is_closing():
            transport.close()
