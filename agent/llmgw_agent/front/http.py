"""The server side of HTTP/1.1 for the front: requests read within limits, connections governed.

The front's port is the one thing on the node that another user, or anyone on
the network, can reach; nothing a client sends may hold the front's memory or
its file descriptors for long before the client has shown a key:

* A request's head is read line by line, at most `MAX_HEAD_BYTES` and
  `MAX_HEADER_LINES`, and must arrive whole within `head_timeout_s`; a
  keep-alive connection waits `idle_timeout_s` for its next request. The body
  is read only when the caller asks (after it checked the key), and must keep
  coming: never silent for `body_timeout_s`, and whole by `body_timeout_s`
  plus a second per `min_body_bytes_per_s`.
* `parse_head` is pure and strict wherever laxness would let one request mean
  two things to two parsers: only CRLF ends a line (a bare LF inside a value
  would reach the engine as a header line of its own), no obs-fold, no two
  different lengths, no length beside a transfer coding.
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
import errno
import re
import socket
import ssl

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Awaitable, Callable, Dict, List, Optional, Set, Tuple  # noqa: F401 (type comments)

MAX_HEAD_BYTES = 64 * 1024
MAX_HEADER_LINES = 100
HEAD_TIMEOUT_S = 10.0
"""How long a request's head (and, on HTTPS, the handshake before it) may take to arrive."""
IDLE_TIMEOUT_S = 60.0
"""How long a keep-alive connection may wait for its next request."""
BODY_TIMEOUT_S = 10.0
"""The longest a body may fall silent; also its allowance on top of `MIN_BODY_BYTES_PER_S`."""
MIN_BODY_BYTES_PER_S = 64 * 1024
"""The slowest a body may arrive on average: 64 MiB gets 10 s + 1,024 s."""
LINGER_S = 2.0
"""After an answer that closes the connection, how long what the client still sends is dropped
(so it reads the answer rather than a reset: closing with unread bytes sends an RST)."""
FD_RESERVE = 64
"""Descriptors kept out of the connection cap: stdio, the listeners, the control socket, health
checks, the event loop's own."""
MIN_CONNECTIONS = 8
MAX_CONNECTIONS_CEILING = 8192
"""The most connections a front holds whatever its open-file limit (each costs memory)."""
ACCEPT_BACKOFF_S = 0.01
ACCEPT_BACKOFF_MAX_S = 1.0

REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_TARGET = re.compile(r"[\x21-\x7e]+\Z")
_VERSION = re.compile(r"HTTP/[0-9]\.[0-9]\Z")
_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_DIGITS = re.compile(r"[0-9]+\Z")
_HUGE_LENGTH = 10**18
"""What a Content-Length of more digits than any cap is taken as (int() of 5,000 digits raises)."""
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Refusal(Exception):
    """A request the front answers with an error and then closes: the status, the outcome it is
    counted under, and a sentence for the client."""

    def __init__(self, status: int, outcome: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.outcome = outcome
        self.message = message


def _bad(message: str) -> Refusal:
    return Refusal(400, "bad_request", message)


def _head_too_large() -> Refusal:
    return Refusal(
        431,
        "too_large",
        "The request's head is over {} bytes or {} header lines.".format(
            MAX_HEAD_BYTES, MAX_HEADER_LINES
        ),
    )


class Limits:
    """The times and caps a front runs with: the constants, or its configuration's `limits`.

    The connection caps are None unless configured: `connection_caps` derives
    them from the open-file limit.
    """

    FIELDS = (
        "head_timeout_s",
        "idle_timeout_s",
        "body_timeout_s",
        "min_body_bytes_per_s",
        "linger_s",
        "max_connections",
        "max_connections_per_peer",
    )

    def __init__(self, raw: Optional[dict] = None) -> None:
        """Read from a configuration's `limits` (any of `FIELDS`; the rest keep their defaults).

        Raises:
            ValueError: an unknown name, or a value that is not a positive number.
        """
        raw = dict(raw or {})
        unknown = sorted(set(raw) - set(self.FIELDS))
        if unknown:
            raise ValueError("limits has no {} (it has {})".format(unknown, ", ".join(self.FIELDS)))
        self.head_timeout_s = _positive(raw, "head_timeout_s", HEAD_TIMEOUT_S)
        self.idle_timeout_s = _positive(raw, "idle_timeout_s", IDLE_TIMEOUT_S)
        self.body_timeout_s = _positive(raw, "body_timeout_s", BODY_TIMEOUT_S)
        self.min_body_bytes_per_s = _positive(raw, "min_body_bytes_per_s", MIN_BODY_BYTES_PER_S)
        self.linger_s = _positive(raw, "linger_s", LINGER_S)
        self.max_connections = _count(raw, "max_connections")
        self.max_connections_per_peer = _count(raw, "max_connections_per_peer")


def _positive(raw: dict, name: str, default: float) -> float:
    value = float(raw.get(name, default))
    if not value > 0:
        raise ValueError("limits.{} must be above 0, not {!r}".format(name, raw[name]))
    return value


def _count(raw: dict, name: str) -> Optional[int]:
    if raw.get(name) is None:
        return None
    value = int(raw[name])
    if value < 1:
        raise ValueError("limits.{} must be at least 1, not {!r}".format(name, raw[name]))
    return value


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


# --- the request head -----------------------------------------------------------


class Request:
    """A parsed request head: what the front routes, checks and passes on."""

    __slots__ = ("close", "content_length", "expects", "headers", "method", "target", "version")

    def __init__(
        self,
        method: str,
        target: str,
        version: str,
        headers: List[Tuple[str, str]],
        content_length: int,
    ) -> None:
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
        self.content_length = content_length
        tokens = {t.strip().lower() for t in self.header("connection").split(",")}
        self.close = "close" in tokens or version == "HTTP/1.0"
        """Whether the connection ends after this request (HTTP/1.0 is not kept alive)."""
        self.expects = self.header("expect").lower()

    def header(self, name: str) -> str:
        """The value of header `name` (any case), "" when absent; the last when repeated."""
        found = ""
        lowered = name.lower()
        for given, value in self.headers:
            if given.lower() == lowered:
                found = value
        return found


def parse_head(head: bytes) -> Request:
    """The request a head (request line to blank line, CRLF-terminated) holds.

    Raises:
        Refusal: 400 for what does not parse as one meaning (bare CR or LF,
            obs-fold, a bad name, two lengths, a length with a transfer
            coding, no or two `Host` on HTTP/1.1), 411 for a body without a
            `Content-Length`, 431 for a head too large, 505 for an HTTP
            version other than 1.0 and 1.1.
    """
    if len(head) > MAX_HEAD_BYTES:
        raise _head_too_large()
    crlf = head.count(b"\r\n")
    if head.count(b"\n") != crlf or head.count(b"\r") != crlf:
        raise _bad("A bare CR or LF is in the request's head: only CRLF ends a line.")
    if not head.endswith(b"\r\n\r\n"):
        raise _bad("The request's head does not end with a blank line.")
    lines = head[:-4].decode("latin-1").split("\r\n")
    if len(lines) - 1 > MAX_HEADER_LINES:
        raise _head_too_large()
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not _TARGET.match(parts[1]):
        raise _bad("The request line is not METHOD TARGET HTTP/1.1.")
    method, target, version = parts
    if not _VERSION.match(version):
        raise _bad("The request line is not METHOD TARGET HTTP/1.1.")
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise Refusal(505, "bad_request", "Only HTTP/1.0 and HTTP/1.1 are served here.")
    headers = []  # type: List[Tuple[str, str]]
    for line in lines[1:]:
        if line[:1] in (" ", "\t"):
            raise _bad("A header line is folded (obs-fold): send each header on one line.")
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.match(name):
            raise _bad("A header line is not NAME: VALUE.")
        value = value.strip(" \t")
        if _VALUE_BAD.search(value):
            raise _bad("A header's value holds a control character.")
        headers.append((name, value))
    return Request(method, target, version, headers, _framing(version, headers))


def _framing(version: str, headers: List[Tuple[str, str]]) -> int:
    """The body's length, from headers that must say it one way only."""
    named = {}  # type: Dict[str, List[str]]
    for name, value in headers:
        named.setdefault(name.lower(), []).append(value)
    for single in ("host", "authorization"):
        if len(named.get(single, ())) > 1:
            raise _bad("The request has two {} headers.".format(single.capitalize()))
    if version == "HTTP/1.1" and "host" not in named:
        raise _bad("An HTTP/1.1 request needs a Host header.")
    lengths = {v.strip() for given in named.get("content-length", ()) for v in given.split(",")}
    if "transfer-encoding" in named:
        if lengths:
            raise _bad("The request has both Content-Length and Transfer-Encoding.")
        raise Refusal(
            411, "bad_request", "Send the body with a Content-Length (no chunked bodies here)."
        )
    if not lengths:
        return 0
    if len(lengths) > 1:
        raise _bad("The request's Content-Length values differ.")
    length = lengths.pop()
    if not _DIGITS.match(length):
        raise _bad("The request's Content-Length is not a number.")
    return int(length) if len(length) <= 18 else _HUGE_LENGTH


def clean_path(target: str) -> Optional[str]:
    """The path of an origin-form target (before `?`), None when it could name another route
    once someone decodes or normalises it: a percent-encoded or literal `.`/`..` segment, an
    empty segment (`//`), a backslash or a NUL. The path is returned as sent (not decoded)."""
    from urllib.parse import unquote

    path = target.split("?", 1)[0]
    if not path.startswith("/") or "#" in path:
        return None
    try:
        decoded = unquote(path, errors="strict") if "%" in path else path
    except UnicodeDecodeError:
        return None
    if "\\" in decoded or "\x00" in decoded:
        return None
    segments = decoded.split("/")[1:]
    for index, segment in enumerate(segments):
        if segment in (".", "..") or (segment == "" and index < len(segments) - 1):
            return None
    return path


# --- reading from a connection ----------------------------------------------------


async def read_request(
    reader: asyncio.StreamReader, limits: Limits, fresh: bool
) -> Optional[Request]:
    """The next request's head on a connection; None when the client closed, or let a kept-alive
    connection go idle past `idle_timeout_s` (nothing to answer then).

    Args:
        fresh: the connection's first request: no idle wait, its head is due at once.

    Raises:
        Refusal: 408 when the head did not arrive in time, or what `parse_head` refuses.
    """
    first = b""
    if not fresh:
        try:
            first = await asyncio.wait_for(reader.read(1), limits.idle_timeout_s)
        except asyncio.TimeoutError:
            return None
        if not first:
            return None
    try:
        head = await asyncio.wait_for(_read_head(reader, first), limits.head_timeout_s)
    except asyncio.TimeoutError:
        raise Refusal(
            408,
            "timeout",
            "The request's head did not arrive within {:g} s.".format(limits.head_timeout_s),
        ) from None
    return parse_head(head) if head is not None else None


async def _read_head(reader: asyncio.StreamReader, first: bytes) -> Optional[bytes]:
    """The head's bytes, up to its blank line or to the first line that does not end in CRLF
    (`parse_head` then says why it is refused); None when the client closed first."""
    head = bytearray()
    pending = first
    skipped = 0
    lines = 0
    while True:
        try:
            line = pending + await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            return None
        except asyncio.LimitOverrunError:
            raise _head_too_large() from None
        pending = b""
        if not head and line == b"\r\n":
            skipped += 2  # blank lines before a request line are ignored (RFC 9112, 2.2)
            if skipped > MAX_HEAD_BYTES:
                raise _head_too_large()
            continue
        head += line
        lines += 1
        if len(head) > MAX_HEAD_BYTES or lines > MAX_HEADER_LINES + 2:
            raise _head_too_large()
        if line == b"\r\n" or not line.endswith(b"\r\n"):
            return bytes(head)


async def read_body(reader: asyncio.StreamReader, length: int, limits: Limits) -> bytes:
    """A body of `length` bytes, which must keep arriving.

    Raises:
        Refusal: 408 when it fell silent for `body_timeout_s`, or was not whole
            by `body_timeout_s` plus a second per `min_body_bytes_per_s`.
        ConnectionError: the client closed before the last byte.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.body_timeout_s + length / limits.min_body_bytes_per_s
    pieces = []  # type: List[bytes]
    left = length
    while left:
        wait_s = min(limits.body_timeout_s, deadline - loop.time())
        try:
            if wait_s <= 0:
                raise asyncio.TimeoutError
            piece = await asyncio.wait_for(reader.read(min(left, 1 << 20)), wait_s)
        except asyncio.TimeoutError:
            raise Refusal(
                408, "timeout", "The request's body stopped arriving ({} bytes short).".format(left)
            ) from None
        if not piece:
            raise ConnectionError("the client closed with {} bytes of its body unsent".format(left))
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces)


async def close_gently(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, linger_s: float
) -> None:
    """Close after an answer that ends the connection: the write side first, then what the
    client still sends (the rest of a body not read) is dropped for at most `linger_s`.

    Closing a socket with unread bytes sends a reset, and a client still
    sending its body may then lose the answer it was sent.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + linger_s
    try:
        if writer.can_write_eof():
            writer.write_eof()
        while True:
            left = deadline - loop.time()
            if left <= 0 or not await asyncio.wait_for(reader.read(1 << 16), left):
                break
    except (OSError, asyncio.TimeoutError):
        pass  # the client went, or kept sending past the linger: close either way
    finally:
        writer.close()


# --- the connections held ---------------------------------------------------------


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
