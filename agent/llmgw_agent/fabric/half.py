"""One half of a fabric test, as both the real and the simulated runs see it.

The options a half is given (checked: an adapter name or an address reaches
argv), the command line `ib_write_bw` gets, and the shape of what a half
answers. `fabric.run` (the real tools) and `fabric.replay` (the simulated
nodes) both build on this module, which imports neither.

The nodes are shared, so a half's TCP port takes only its own peer: whoever
starts the test (the console) makes a secret for it and sends it to both
halves in the op's arguments, over the agents' private SSH channels. Before
any byte counts, the two prove to each other that they hold it (`accept_peer`,
`prove_to_server`: HMAC-SHA256 over nonces of both sides, so nothing a
listener sees can be replayed). A connection that fails is closed and the
server waits on for its peer until its own deadline: another user of a node
who connects first can neither end the test nor be measured in its place.
The secret is never put in an argv, a result, a log or a file.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from llmgw_agent.op_args import OpError, arg, number_arg

Emit = Callable[[Dict[str, Any]], None]

PERFTEST = "ib_write_bw"
DEFAULT_OOB_PORT = 18515
"""perftest's default out-of-band TCP port; the console gives each concurrent rail its own."""
DEFAULT_SIZE_BYTES = 8 * 1024 * 1024
"""Large messages: small ones under-report (perftest issues #252, #318)."""
DEFAULT_DURATION_S = 5.0
DEFAULT_QPS = 2
DEFAULT_ACCEPT_TIMEOUT_S = 60.0
LISTEN_WAIT_S = 15.0
"""How long the server half waits for ib_write_bw to open its port before giving up."""
OUTPUT_LIMIT_BYTES = 512 * 1024
TCP_BUFFER_BYTES = 1024 * 1024
SECRET_MIN_BYTES = 16
NONCE_BYTES = 32
HANDSHAKE_S = 5.0
"""How long one connection may take to prove it is the peer before it is dropped."""
HANDSHAKES_AT_ONCE = 32
"""Connections proving themselves at once; more are closed unread (a flood is not the peer)."""
_HELLO = b"llmgw-fabric-1\n"


class HalfOptions:
    """The options of one half, checked; the same for both halves except the address."""

    def __init__(self, args: Dict[str, Any], side: str) -> None:
        self.side = side
        self.method = arg(args, "method", (str,), PERFTEST)
        if self.method not in (PERFTEST, "tcp"):
            raise OpError("bad_args", "method must be 'ib_write_bw' or 'tcp'")
        default_port = DEFAULT_OOB_PORT if self.method == PERFTEST else 0
        self.port = int(number_arg(args, "port", default_port, maximum=65535))
        self.duration_s = float(number_arg(args, "duration_s", DEFAULT_DURATION_S, 0.1, 600.0))
        iterations = number_arg(args, "iterations", None, 1, 10_000_000)
        self.iterations = int(iterations) if iterations is not None else None
        self.size_bytes = int(number_arg(args, "size_bytes", DEFAULT_SIZE_BYTES, 2, 2**31))
        self.qps = int(number_arg(args, "qps", DEFAULT_QPS, 1, 64))
        self.accept_timeout_s = float(
            number_arg(args, "accept_timeout_s", DEFAULT_ACCEPT_TIMEOUT_S, 0.1, 3600.0)
        )
        self.device = arg(args, "device", (str,), None)
        if self.method == PERFTEST and not self.device:
            raise OpError("bad_args", "argument 'device' is required for ib_write_bw")
        if self.device is not None and not _safe_token(self.device):
            raise OpError("bad_args", "device {!r} is not an adapter name".format(self.device))
        self.ib_port = int(number_arg(args, "ib_port", 1, 1, 16))
        gid = number_arg(args, "gid_index", None, 0, 1024)
        self.gid_index = int(gid) if gid is not None else None
        numa = number_arg(args, "numa_node", None, 0, 1024)
        self.numa_node = int(numa) if numa is not None else None
        self.server_address = arg(args, "server_address", (str,), None)
        if side == "client" and not self.server_address:
            raise OpError("bad_args", "argument 'server_address' is required for a client")
        if self.server_address is not None and not _safe_token(self.server_address):
            raise OpError(
                "bad_args", "server_address {!r} is not an address".format(self.server_address)
            )
        self.bind_address = arg(args, "bind_address", (str,), None)
        self.secret = _secret(arg(args, "secret", (str,), None))

    def required_secret(self) -> bytes:
        """The test's secret, which a half that opens or reaches a TCP port must be given.

        Raises:
            OpError: `bad_args` when the console sent none.
        """
        if self.secret is None:
            raise OpError(
                "bad_args",
                "argument 'secret' is required: a half's port takes only the peer holding it",
            )
        return self.secret

    @property
    def expected_run_s(self) -> float:
        """How long the tool should take once connected (iterations: a generous guess)."""
        return self.duration_s if self.iterations is None else 60.0


def _secret(text: Optional[str]) -> Optional[bytes]:
    """The secret's bytes from its hex text (never quoted back in a message)."""
    if text is None:
        return None
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise OpError("bad_args", "argument 'secret' must be hex") from None
    if len(secret) < SECRET_MIN_BYTES:
        raise OpError(
            "bad_args", "argument 'secret' must be {} bytes or more".format(SECRET_MIN_BYTES)
        )
    return secret


def _safe_token(text: str) -> bool:
    """An adapter name or an address: letters, digits and `._:-%` only (it reaches argv).

    Never a leading `-`: `-h` would be read as an option of ib_write_bw, not a host.
    """
    return (
        bool(text)
        and not text.startswith("-")
        and all(ch.isascii() and (ch.isalnum() or ch in "._:-%") for ch in text)
    )


def ib_write_bw_argv(options: HalfOptions, numactl: bool) -> List[str]:
    """The command line of one half (the client's ends with the server's address)."""
    argv: List[str] = []
    if numactl and options.numa_node is not None:
        node = str(options.numa_node)
        argv += ["numactl", "--cpunodebind=" + node, "--membind=" + node]
    argv += [PERFTEST, "-d", str(options.device), "-i", str(options.ib_port)]
    if options.gid_index is not None:
        argv += ["-x", str(options.gid_index)]
    argv += ["-p", str(options.port), "--report_gbits", "-s", str(options.size_bytes)]
    if options.iterations is not None:
        argv += ["-n", str(options.iterations)]
    else:
        argv += ["-D", str(max(1, round(options.duration_s)))]
    argv += ["-q", str(options.qps), "-F"]
    if options.side == "client":
        argv.append(str(options.server_address))
    return argv


def half_result(options: HalfOptions, **values: Any) -> Dict[str, Any]:
    """The answer of one half: method, side, device and port, plus `values`."""
    result = {
        "method": options.method,
        "side": options.side,
        "device": options.device,
        "port": options.port,
    }
    result.update(values)
    return result


def listening_event(options: HalfOptions, address: Optional[str]) -> Dict[str, Any]:
    """The event a server half sends once a client may connect."""
    return {"listening": True, "method": options.method, "port": options.port, "address": address}


def accept_peer(
    listener: socket.socket, cancelled: threading.Event, timeout_s: float, secret: bytes
) -> Optional[socket.socket]:
    """The first connection within `timeout_s` that proves it holds `secret`.

    Each connection proves itself on a thread of its own, so one that sends
    nothing delays no other; one that fails is closed and the wait goes on.
    None when no peer came or the test was cancelled.
    """
    listener.settimeout(0.2)
    deadline = time.monotonic() + timeout_s
    lock = threading.Lock()
    pending = threading.Semaphore(HANDSHAKES_AT_ONCE)
    found = threading.Event()
    chosen: Dict[str, Any] = {"peer": None, "open": True}

    def prove(connection: socket.socket) -> None:
        try:
            proved = _peer_proves(connection, secret, deadline)
        finally:
            pending.release()
        with lock:
            if proved and chosen["open"] and chosen["peer"] is None:
                chosen["peer"] = connection
                found.set()
                return
        connection.close()

    while time.monotonic() < deadline and not cancelled.is_set() and not found.is_set():
        try:
            connection, _address = listener.accept()
        except socket.timeout:
            continue
        if not pending.acquire(blocking=False):
            connection.close()
            continue
        threading.Thread(target=prove, args=(connection,), daemon=True).start()
    with lock:
        chosen["open"] = False  # a connection still proving itself now closes its own
        peer = chosen["peer"]
    if peer is not None:
        peer.settimeout(0.5)
    return peer


def _mac(secret: bytes, side: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(secret, side + first + second, hashlib.sha256).digest()


def _read_exactly(connection: socket.socket, count: int) -> Optional[bytes]:
    """`count` bytes, or None when the peer closed first (a timeout raises)."""
    received = b""
    while len(received) < count:
        chunk = connection.recv(count - len(received))
        if not chunk:
            return None
        received += chunk
    return received


def _peer_proves(connection: socket.socket, secret: bytes, deadline: float) -> bool:
    """The server's side: send a nonce, check the client's answer, prove ourselves back."""
    connection.settimeout(max(0.05, min(HANDSHAKE_S, deadline - time.monotonic())))
    nonce = os.urandom(NONCE_BYTES)
    try:
        connection.sendall(_HELLO + nonce)
        answer = _read_exactly(connection, NONCE_BYTES + hashlib.sha256().digest_size)
        if answer is None:
            return False
        theirs, mac = answer[:NONCE_BYTES], answer[NONCE_BYTES:]
        if not hmac.compare_digest(mac, _mac(secret, b"client", nonce, theirs)):
            return False
        connection.sendall(_mac(secret, b"server", theirs, nonce))
    except OSError:
        return False
    return True


def prove_to_server(connection: socket.socket, secret: bytes, where: str) -> None:
    """The client's side: answer the server's nonce, and check that the server holds it too.

    Raises:
        OpError: `failed` when what answered at `where` is not the test's server half.
    """
    not_ours = OpError(
        "failed",
        "what answers at {} is not this test's server half (it does not hold the "
        "test's secret)".format(where),
    )
    try:
        hello = _read_exactly(connection, len(_HELLO) + NONCE_BYTES)
        if hello is None or not hello.startswith(_HELLO):
            raise not_ours
        nonce, mine = hello[len(_HELLO) :], os.urandom(NONCE_BYTES)
        connection.sendall(mine + _mac(secret, b"client", nonce, mine))
        proof = _read_exactly(connection, hashlib.sha256().digest_size)
    except OSError as exc:
        raise OpError("failed", "the connection to {} broke: {}".format(where, exc)) from exc
    if proof is None or not hmac.compare_digest(proof, _mac(secret, b"server", mine, nonce)):
        raise not_ours


def stop_reason(cancelled: threading.Event) -> Optional[str]:
    """`cancelled` when the console cancelled the request, else None."""
    return "cancelled" if cancelled.is_set() else None
