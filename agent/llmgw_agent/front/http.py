"""The server side of HTTP/1.1 for the front: each request read within limits.

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
* The connections themselves (how many, by whom, which is closed to make
  room, how they are accepted) are `connections.py`'s.
"""

from __future__ import annotations

import asyncio
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Tuple  # noqa: F401 (type comments)

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
    them from the open-file limit (`connections.py`).
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
