"""The front against clients that would starve it: real processes, raw bytes over sockets.

A keyless client is answered from its head, before its body; heads, bodies and
idle connections have time limits (made small here through the front's
`limits`); connections that have not shown a key are closed to make room for
one that has; and a head that two parsers could read two ways is refused
before anything reaches an engine. The head parser is also fuzzed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import agent_env
from hypothesis import given, settings
from hypothesis import strategies as st
from ports import free_port

from llmgw_agent.front import connections, http
from llmgw_agent.front.control import call

KEY = "sk-front-limits-0123456789"
ENGINE_KEY = "sk-engine-limits-9876543210"
QUICK = {
    "head_timeout_s": 1.0,
    "idle_timeout_s": 1.0,
    "body_timeout_s": 1.0,
    "linger_s": 0.5,
}


class Engine:
    """A stand-in engine on a raw socket: it records every head it is sent and answers 200."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection, connection.makefile("rb") as stream:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = stream.readline()
                    if not line:
                        return
                    head += line
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                stream.read(length)
                if not head.startswith(b"GET /health "):
                    self.heads.append(head)
                body = b'{"choices": []}'
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )

    def close(self) -> None:
        self.listener.close()


@contextlib.contextmanager
def running_front(
    tmp_path: Path, limits: dict, open_files: int | None = None, tls: dict | None = None
) -> Iterator[tuple[int, str, Engine, subprocess.Popen]]:
    """A front process with `limits` (an open-file limit, TLS), one stand-in engine behind it."""
    private = tmp_path / "shard"
    private.mkdir(mode=0o700, exist_ok=True)
    control = str(private / f"front-{free_port()}.sock")
    port = free_port()
    config = {
        "keys": [{"id": "ops", "key": KEY, "models": None}],
        "upstream": {"m": ENGINE_KEY},
        "limits": limits,
        **({"tls": tls} if tls else {}),
    }

    def lower_open_files() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    process = subprocess.Popen(
        [
            *(sys.executable, "-S", "-m", "llmgw_agent", "front"),
            *("--listen", f"127.0.0.1:{port}", "--control", control),
        ],
        env=agent_env(tmp_path / "state", LLMGW_FRONT_CONFIG=json.dumps(config)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=lower_open_files,
    )
    engine = Engine()
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith(b"llmgw front on 127.0.0.1:")
        worker = {"url": f"http://127.0.0.1:{engine.port}", "model_id": "m"}
        assert call(control, "POST", "/workers", worker)[0] == 200
        yield port, control, engine, process
    finally:
        process.terminate()
        process.wait(10)
        engine.close()


@pytest.fixture(scope="module")
def quick_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str, Engine]]:
    with running_front(tmp_path_factory.mktemp("front-limits"), QUICK) as (port, control, e, _):
        yield port, control, e


def _chat(key: str = KEY, close: bool = True) -> bytes:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    return (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {key}\r\nContent-Length: {len(body)}\r\n"
        f"{'Connection: close' + chr(13) + chr(10) if close else ''}\r\n{body}"
    ).encode()


def _until_close(connection: socket.socket) -> bytes:
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _one_answer(connection: socket.socket) -> bytes:
    """One whole answer (head and Content-Length body) on a kept-alive connection."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += connection.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += connection.recv(65536)
    return head + b"\r\n\r\n" + body


def _exchange(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(raw)
        return _until_close(connection)


def _error_of(answer: bytes) -> dict:
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]


def _counted(control: str) -> str:
    status, text = call(control, "GET", "/metrics")
    assert status == 200
    return text


# --- the key before the body -------------------------------------------------------


def test_a_keyless_request_trickling_its_body_is_refused_before_it_sends_the_body(quick_front):
    port, _control, engine = quick_front
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 10000000\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(head + b"{")
        started = time.monotonic()
        answer = _until_close(connection)  # one byte of ten million sent
        waited_s = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 401 Unauthorized\r\n")
    assert b"Connection: close\r\n" in answer
    assert "API key" in _error_of(answer)["message"]
    assert waited_s < 0.5 * QUICK["head_timeout_s"]
    assert not engine.heads


def test_a_wrong_key_is_refused_from_the_head_and_the_connection_closed(quick_front):
    port, _control, engine = quick_front
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 10000000\r\n"
        b"Authorization: Bearer sk-not-the-key-0123456\r\n\r\n"
    )
    answer = _exchange(port, head)
    assert answer.startswith(b"HTTP/1.1 401 ")
    assert _error_of(answer)["code"] == "invalid_api_key"
    assert not engine.heads


def test_a_keyed_request_is_passed_with_the_engines_key_and_health_needs_none(quick_front):
    port, _control, engine = quick_front
    assert _exchange(port, _chat()).startswith(b"HTTP/1.1 200 OK\r\n")
    assert f"Authorization: Bearer {ENGINE_KEY}".encode() in engine.heads[-1]
    health = b"GET /health HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n"
    assert _exchange(port, health).startswith(b"HTTP/1.1 200 ")
    engine.heads.clear()


# --- heads that mean two things ------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nX-A: 1\nX-Smuggled: 2\r\n", 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nX-A: 1\rX-Smuggled: 2\r\n", 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nX-A: 1\r\n  folded\r\n", 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nX A: 1\r\n", 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nX-A : 1\r\n", 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nX-A: a\x00b\r\n", 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 2, 3\r\n", 400),
        (b"POST /v1/x HTTP/1.1\r\nHost: g\r\nContent-Length: 2\r\nContent-Length: 3\r\n", 400),
        (b"POST /v1/x HTTP/1.1\r\nHost: g\r\nContent-Length: 2\r\nTransfer-Encoding: x\r\n", 400),
        (b"POST /v1/x HTTP/1.1\r\nHost: g\r\nContent-Length: -2\r\n", 400),
        (b"POST /v1/x HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked\r\n", 411),
        (b"POST /v1/x HTTP/1.1\r\nHost: g\r\nHost: h\r\n", 400),
        (b"POST /v1/x HTTP/1.1\r\n", 400),
        (b"POST /v1/x  HTTP/1.1\r\nHost: g\r\n", 400),
        (b"POST /v1/x HTTP/2.0\r\nHost: g\r\n", 505),
        (b"POST /v1/x HTTP/1.1 extra\r\nHost: g\r\n", 400),
    ],
)
def test_a_head_two_parsers_could_read_two_ways_is_refused_and_reaches_no_engine(
    quick_front, head: bytes, status: int
):
    port, _control, engine = quick_front
    keyed = head + f"Authorization: Bearer {KEY}\r\nConnection: keep-alive\r\n\r\n".encode()
    answer = _exchange(port, keyed + b"{}")
    assert answer.startswith(f"HTTP/1.1 {status} ".encode())
    assert b"Connection: close\r\n" in answer
    assert _error_of(answer)["type"] == "invalid_request_error"
    assert not engine.heads


def test_a_bare_lf_is_answered_at_once_not_after_the_head_timeout(quick_front):
    port, _control, _engine = quick_front
    started = time.monotonic()
    answer = _exchange(port, b"GET /v1/models HTTP/1.1\nHost: g\n\n")
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert time.monotonic() - started < 0.5 * QUICK["head_timeout_s"]


@pytest.mark.parametrize(
    "target",
    [
        "/workers",
        "/WORKERS",
        "//workers",
        "/v1/../workers",
        "/v1/./../workers",
        "/v1/%2e%2e/workers",
        "/v1/%2E%2E/workers",
        "/v1/models/..%2Fworkers",
        "/v1//workers",
        "/v1/models\\..\\..\\workers",
        "/%76%31/models",
        "/V1/models",
        "/metrics",
        "http://g/workers",
        "*",
    ],
)
def test_admin_routes_are_404_whatever_the_path_tricks(quick_front, target: str):
    port, _control, engine = quick_front
    raw = (
        f"POST {target} HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer {KEY}\r\n"
        "Content-Length: 0\r\nConnection: close\r\n\r\n"
    ).encode()
    answer = _exchange(port, raw)
    assert answer.startswith(b"HTTP/1.1 404 ")
    assert _error_of(answer)["message"].startswith("Invalid URL (POST ")
    assert not engine.heads


# --- sizes ---------------------------------------------------------------------------


def test_a_head_over_64_kib_is_431(quick_front):
    port, control, _engine = quick_front
    raw = b"GET /v1/models HTTP/1.1\r\nHost: g\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n"
    assert _exchange(port, raw).startswith(b"HTTP/1.1 431 ")
    many = b"".join(b"X-%d: 1\r\n" % n for n in range(101))
    assert _exchange(port, b"GET /v1/models HTTP/1.1\r\nHost: g\r\n" + many + b"\r\n").startswith(
        b"HTTP/1.1 431 "
    )
    assert 'llmgw_gateway_requests_total{key="none",outcome="too_large"}' in _counted(control)


def test_a_keyed_body_over_64_mib_is_413_before_any_of_it_is_read(quick_front):
    port, control, engine = quick_front
    raw = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer "
        f"{KEY}\r\nContent-Length: {64 * 1024 * 1024 + 1}\r\n\r\n"
    ).encode()
    answer = _exchange(port, raw)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert "67108864 bytes" in _error_of(answer)["message"]
    assert 'llmgw_gateway_requests_total{key="ops",outcome="too_large"} 1' in _counted(control)
    assert not engine.heads


# --- time ----------------------------------------------------------------------------


def test_a_head_that_does_not_arrive_in_time_is_408(quick_front):
    port, control, _engine = quick_front
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n")
        started = time.monotonic()
        answer = _until_close(connection)
        waited_s = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert 0.5 * QUICK["head_timeout_s"] < waited_s < 3 * QUICK["head_timeout_s"]
    assert 'llmgw_gateway_requests_total{key="none",outcome="timeout"}' in _counted(control)


def test_a_keyed_body_that_stops_arriving_is_408_and_reaches_no_engine(quick_front):
    port, _control, engine = quick_front
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer "
        f"{KEY}\r\nContent-Length: 100\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(head + b'{"model": ')
        started = time.monotonic()
        answer = _until_close(connection)
        waited_s = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert "90 bytes short" in _error_of(answer)["message"]
    assert waited_s < 3 * QUICK["body_timeout_s"]
    assert not engine.heads


def test_a_kept_alive_connection_left_idle_is_closed(quick_front):
    port, _control, _engine = quick_front
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(_chat(close=False))
        assert _one_answer(connection).startswith(b"HTTP/1.1 200 ")
        connection.sendall(_chat(close=False))  # the connection carries a second request
        assert _one_answer(connection).startswith(b"HTTP/1.1 200 ")
        started = time.monotonic()
        assert _until_close(connection) == b""  # closed quietly: no 408 to an idle client
        waited_s = time.monotonic() - started
    assert 0.5 * QUICK["idle_timeout_s"] < waited_s < 3 * QUICK["idle_timeout_s"]


# --- connections ---------------------------------------------------------------------


def test_at_the_cap_half_sent_connections_are_closed_for_a_keyed_one(tmp_path: Path):
    limits = {"max_connections": 20, "max_connections_per_peer": 20, "head_timeout_s": 60.0}
    with running_front(tmp_path, limits) as (port, control, _engine, _process):
        keyed = socket.create_connection(("127.0.0.1", port), timeout=10)
        keyed.sendall(_chat(close=False))
        assert _one_answer(keyed).startswith(b"HTTP/1.1 200 ")  # authenticated: kept
        idle = []
        for _ in range(40):
            connection = socket.create_connection(("127.0.0.1", port), timeout=10)
            connection.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n")
            idle.append(connection)
        started = time.monotonic()
        answer = _exchange(port, _chat())
        waited_s = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert waited_s < 3.0
        keyed.sendall(_chat())  # the authenticated connection was not evicted
        assert _until_close(keyed).startswith(b"HTTP/1.1 200 ")
        closed = 0
        for connection in idle:
            connection.settimeout(0.05)
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                if connection.recv(1) == b"":
                    closed += 1
            connection.close()
        keyed.close()
        assert closed >= 21  # 40 half-sent, 18 places left beside the keyed connections
        counted = _counted(control)
        assert 'llmgw_gateway_requests_total{key="none",outcome="evicted"}' in counted


def test_a_front_out_of_descriptors_evicts_and_backs_off_instead_of_spinning(tmp_path: Path):
    # Caps above what 96 descriptors hold: accept() meets EMFILE.
    limits = {"max_connections": 1000, "max_connections_per_peer": 1000, "head_timeout_s": 60.0}
    with running_front(tmp_path, limits, open_files=96) as (port, _control, _engine, process):
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(150)]
        time.sleep(0.5)
        before_s = _cpu_s(process.pid)
        time.sleep(1.0)
        spent_s = _cpu_s(process.pid) - before_s
        started = time.monotonic()
        answer = _exchange(port, _chat())
        waited_s = time.monotonic() - started
        for connection in idle:
            connection.close()
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert waited_s < 3.0
    assert spent_s < 0.5  # a hot accept loop would spend the whole second


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


def _certificate() -> tuple[str, str]:
    """A self-signed certificate for `localhost` and its key (PEM)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem.decode()


def test_over_https_a_keyed_request_passes_and_a_handshake_never_begun_is_closed(tmp_path: Path):
    import ssl

    cert_pem, key_pem = _certificate()
    tls = {"cert": cert_pem, "key": key_pem}
    with running_front(tmp_path, QUICK, tls=tls) as (port, _control, engine, _process):
        silent = socket.create_connection(("127.0.0.1", port), timeout=10)
        context = ssl.create_default_context(cadata=cert_pem)
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        with context.wrap_socket(raw, server_hostname="localhost") as connection:
            connection.sendall(_chat())
            answer = _until_close(connection)
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert len(engine.heads) == 1
        started = time.monotonic()
        assert _until_close(silent) == b""  # its handshake is part of its head's time
        assert time.monotonic() - started < 3 * QUICK["head_timeout_s"]
        silent.close()


# --- the parts, pure -----------------------------------------------------------------


def test_the_caps_at_1024_open_files_leave_a_descriptor_per_client_for_its_engine():
    assert connections.connection_caps(http.Limits(), 1024) == (480, 240)
    assert connections.connection_caps(http.Limits({"max_connections": 10}), 1024) == (10, 5)
    assert (
        connections.connection_caps(http.Limits(), 10**7)[0] == connections.MAX_CONNECTIONS_CEILING
    )


def test_limits_name_what_is_wrong_with_them():
    with pytest.raises(ValueError, match="limits has no"):
        http.Limits({"head_timeout": 1})
    with pytest.raises(ValueError, match=r"limits.idle_timeout_s must be above 0"):
        http.Limits({"idle_timeout_s": 0})


def test_the_governor_evicts_the_oldest_unauthenticated_and_keeps_the_authenticated():
    governor = connections.Governor(max_connections=3, max_per_peer=2)
    socks = [socket.socket() for _ in range(6)]
    try:
        a, _ = governor.admit("10.0.0.1", socks[0])
        b, _ = governor.admit("10.0.0.2", socks[1])
        c, _ = governor.admit("10.0.0.2", socks[2])
        assert a and b and c
        a.trust()
        d, evicted = governor.admit("10.0.0.3", socks[3])
        assert d and evicted == [b]  # the oldest not trusted; `a` is kept
        e, evicted = governor.admit("10.0.0.2", socks[4])
        assert e and evicted == [c]  # its own peer's oldest, to stay within 2 a peer
        c.trust()  # released slots stay out of the books
        e.trust()
        d.trust()
        f, evicted = governor.admit("10.0.0.4", socks[5])
        assert f is None and evicted == []  # every connection in the way shows a key
        assert governor.connections == 3
        for slot in (a, d, e):
            governor.release(slot)
            governor.release(slot)
        assert governor.connections == 0
    finally:
        for sock in socks:
            sock.close()


HEAD_BYTES = st.one_of(
    st.binary(max_size=300),
    st.lists(
        st.sampled_from(
            [
                b"GET",
                b"POST",
                b" ",
                b"/v1/models",
                b"HTTP/1.1",
                b"HTTP/1.0",
                b"HTTP/2.0",
                b"\r\n",
                b"\n",
                b"\r",
                b"Host: g",
                b"Content-Length: 5",
                b"Content-Length: 07",
                b"Transfer-Encoding: chunked",
                b":",
                b"\t",
                b"\x00",
                b"\xff",
                b"9" * 30,
            ]
        ),
        max_size=40,
    ).map(b"".join),
)


@settings(max_examples=2000, deadline=None)
@given(HEAD_BYTES)
def test_any_bytes_are_a_request_or_a_refusal_never_an_exception(head: bytes):
    try:
        request = http.parse_head(head + b"\r\n\r\n")
    except http.Refusal as refusal:
        assert refusal.status in (400, 411, 431, 505)
        assert refusal.outcome in ("bad_request", "too_large")
        return
    assert request.version in ("HTTP/1.0", "HTTP/1.1")
    assert request.content_length >= 0
    for name, value in request.headers:
        assert "\r" not in name + value and "\n" not in name + value


@settings(max_examples=500, deadline=None)
@given(HEAD_BYTES)
def test_any_bytes_on_a_connection_are_a_request_none_or_a_refusal(head: bytes):
    async def read() -> object:
        reader = asyncio.StreamReader(limit=http.MAX_HEAD_BYTES)
        reader.feed_data(head)
        reader.feed_eof()
        try:
            return await http.read_request(reader, http.Limits(QUICK), fresh=True)
        except http.Refusal as refusal:
            return refusal.status

    outcome = asyncio.run(read())
    assert outcome is None or outcome in (400, 411, 431, 505) or hasattr(outcome, "method")


@settings(max_examples=1000, deadline=None)
@given(st.text(max_size=60))
def test_a_clean_path_never_decodes_to_a_dot_segment(target: str):
    path = http.clean_path(target)
    if path is not None:
        from urllib.parse import unquote

        segments = unquote(path).split("/")
        assert ".." not in segments and "." not in segments and "\\" not in unquote(path)


def test_each_accepted_client_socket_sends_its_writes_at_once():
    """TCP_NODELAY on every client socket the front accepts: asyncio sets it only where the
    socket's protocol number says TCP, and an accepted one's says 0; without it, a stream's
    last small write on a kept-alive connection waited for the client's delayed ACK (40 ms,
    `tests/benchmarks/bench_front_limits.py`: 179 streams a second became 523)."""

    async def scenario() -> int:
        listener = connections.listen("127.0.0.1", 0)
        port = listener.getsockname()[1]
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def handle(reader, writer, slot) -> None:
            sock = writer.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        limits = http.Limits(None)
        governor = connections.Governor(*connections.connection_caps(limits, 1024))
        serving = asyncio.ensure_future(
            connections.serve_connections(listener, handle, governor, limits, None, lambda _: None)
        )
        try:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            nodelay = await asyncio.wait_for(seen, 10)
            writer.close()
        finally:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
            listener.close()
        return nodelay

    assert asyncio.run(scenario()) == 1
