"""The front's control socket: its workers and counters, for the operator alone (standard library).

The gateway's workers are changed and read here, never on a TCP port: the
socket lies in the gateway shard's own folder, inside the agent's state
folder (mode 0700), so only the operator's processes can connect — another
user of the node gets `Permission denied` before a byte is read. The console
reaches it through the agent on its SSH channel (the `gateway.call` op),
which needs nothing of the node's sshd but the channel it already has.

Routes (HTTP/1.1, one request a connection):

* `GET /workers` → `{"workers": [{url, model_id, is_healthy, load, processed,
  failures, pinned, role, bootstrap_port, …}]}`;
* `POST /workers` `{"url", "model_id", "cert"?, "role"?, "bootstrap_port"?}` →
  `{"added": url}`: `cert` is the engine's certificate (PEM), pinned for every
  connection to it; `role` a split's side; `bootstrap_port` an SGLang prefill
  worker's handshake port (its split is then routed SGLang's way, `pd.py`);
* `DELETE /workers/<url, percent-encoded>` → `{"removed": url}` (404: none);
* `GET /metrics` → the front's Prometheus text (per key, per worker);
* `GET /liveness` → 200 while the front runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from urllib.parse import unquote

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional, Tuple

SOCKET_NAME = "front.sock"
MAX_CONTROL_BYTES = 4 * 1024 * 1024
"""The largest request or answer on the control socket (a worker list, a metrics text)."""
CALL_TIMEOUT_S = 10.0


SUN_PATH_MAX = 100
"""A Unix socket's path must fit `sun_path` (108 bytes on Linux, less elsewhere)."""


class _Reachable:
    """A socket path short enough to bind or connect: the path itself, or, when it is too long,
    the same file through `/proc/self/fd/N` of its folder opened for the call."""

    def __init__(self, path: str) -> None:
        self._fd = None  # type: Optional[int]
        self.path = path
        if len(path.encode()) > SUN_PATH_MAX:
            self._fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
            self.path = "/proc/self/fd/{}/{}".format(self._fd, os.path.basename(path))

    def __enter__(self) -> str:
        return self.path

    def __exit__(self, *_exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)


def control_socket(shard_id: str) -> str:
    """Where a gateway shard's front listens for control (inside its shard folder)."""
    from llmgw_agent.shards.records import shards_dir

    return str(shards_dir() / shard_id / SOCKET_NAME)


async def serve_control(
    path: str, handle: Callable[[str, str, bytes], Tuple[int, str, bytes]]
) -> asyncio.AbstractServer:
    """Listen on the Unix socket `path` (made 0600 in a folder only the operator can enter).

    Args:
        handle: (method, path, body) → (status, content type, body).

    Raises:
        OSError: the socket cannot be made, or its folder is open to others.
    """
    folder = os.path.dirname(path)
    mode = os.stat(folder).st_mode & 0o777
    if mode & 0o077:
        raise OSError(
            "the control socket's folder {} is open to others ({:o})".format(folder, mode)
        )
    if os.path.exists(path):
        os.unlink(path)

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target = [*lines[0].split(" "), "", ""][:2]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if not 0 <= length <= MAX_CONTROL_BYTES:
                status, kind, body = 413, "application/json", b'{"error": "too large"}'
            else:
                body_in = await reader.readexactly(length) if length else b""
                status, kind, body = handle(method, unquote(target), body_in)
            writer.write(
                "HTTP/1.1 {} -\r\nContent-Type: {}\r\nContent-Length: {}\r\n"
                "Connection: close\r\n\r\n".format(status, kind, len(body)).encode()
                + body
            )
            await writer.drain()
        except (
            ConnectionError,
            ValueError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
        ):
            pass
        finally:
            writer.close()

    old_umask = os.umask(0o177)
    try:
        with _Reachable(path) as short:
            server = await asyncio.start_unix_server(one, short, limit=MAX_CONTROL_BYTES)
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    return server


def call(path: str, method: str, target: str, body: Optional[dict] = None) -> Tuple[int, str]:
    """One request on a control socket: (status, body text). Blocking (the agent's op thread).

    Raises:
        OSError: nothing listens there (the front is not running).
        ValueError: what came back is not an HTTP answer.
    """
    payload = json.dumps(body).encode() if body is not None else b""
    request = (
        "{} {} HTTP/1.1\r\nHost: llmgw-front\r\nContent-Type: application/json\r\n"
        "Content-Length: {}\r\nConnection: close\r\n\r\n".format(method, target, len(payload))
    ).encode() + payload
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(CALL_TIMEOUT_S)
        with _Reachable(path) as short:
            conn.connect(short)
        conn.sendall(request)
        chunks, size = [], 0
        while True:
            piece = conn.recv(65536)
            if not piece:
                break
            chunks.append(piece)
            size += len(piece)
            if size > MAX_CONTROL_BYTES + 65536:
                raise ValueError("the front's answer is too large")
    raw = b"".join(chunks)
    head, sep, answer = raw.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    if not sep or len(parts) < 2 or not parts[1].isdigit():
        raise ValueError("the front's answer is not HTTP")
    return int(parts[1]), answer.decode("utf-8", "replace")
