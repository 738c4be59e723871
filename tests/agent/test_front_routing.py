"""The front routes by itself: workers on its control socket, the policies, pinned engines.

A real front process, real engines' stand-ins (HTTP servers on threads, one
speaking TLS with a certificate made here), and a stranger who takes a dead
engine's port: it must be sent nothing — no prompt, no key.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import front_process
from ports import free_port

from llmgw_agent.front.control import call

CLIENT_KEY = "sk-front-routing-0123456789"
ENGINE_KEY = "sk-engine-secret-9876543210"


def _identity(tmp_path: Path, name: str) -> tuple[str, Path, Path]:
    """A self-signed certificate and key, as the core makes one per replica (PEM, files here)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "llmgw-engine")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("llmgw-engine")]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    cert_path, key_path = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert_path.write_text(cert_pem)
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_pem, cert_path, key_path


class Engine:
    """A stand-in engine: `/health` 200, chat completions naming itself; it records each request."""

    def __init__(self, name: str, port: int, tls: tuple[Path, Path] | None = None) -> None:
        self.name = name
        self.seen: list[dict[str, str]] = []
        self.connections: list[socket.socket] = []
        engine = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                engine.connections.append(self.connection)

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(200, b"{}")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                engine.seen.append(dict(self.headers))
                answer = {"choices": [{"message": {"content": engine.name}}]}
                self._send(200, json.dumps(answer).encode())

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """As a killed process: the listener and every open connection gone."""
        self.server.shutdown()
        self.server.server_close()
        for connection in self.connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
                connection.close()


class Stranger:
    """Another user's listener on a port: it records every byte anyone sends it."""

    def __init__(self, port: int) -> None:
        self.received = b""
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(16)
        self.listener.settimeout(0.2)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                continue
            connection.settimeout(1.0)
            try:
                while chunk := connection.recv(65536):
                    self.received += chunk
            except OSError:
                pass
            connection.close()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(5)
        self.listener.close()


@pytest.fixture
def front(tmp_path: Path) -> Iterator[tuple[int, str]]:
    config = {
        "keys": [{"id": "ops", "key": CLIENT_KEY, "models": None}],
        "upstream": {"m": ENGINE_KEY},
    }
    with front_process(tmp_path, config, "--policy", "round_robin") as running:
        yield running


def _chat(port: int, key: str = CLIENT_KEY) -> tuple[int, str]:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    raw = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {key}\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n{body}"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as connection:
        connection.sendall(raw)
        answer = b"".join(iter(lambda: connection.recv(65536), b""))
    head, _, payload = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    if status != 200:
        return status, payload.decode()
    return status, json.loads(payload)["choices"][0]["message"]["content"]


def test_workers_come_and_go_on_the_control_socket_and_take_turns(front):
    port, control = front
    a_port, b_port = free_port(), free_port()
    a, b = Engine("a", a_port), Engine("b", b_port)
    try:
        for url in (f"http://127.0.0.1:{a_port}", f"http://127.0.0.1:{b_port}"):
            assert call(control, "POST", "/workers", {"url": url, "model_id": "m"})[0] == 200
        listed = json.loads(call(control, "GET", "/workers")[1])["workers"]
        assert sorted(w["url"] for w in listed) == sorted(
            [f"http://127.0.0.1:{a_port}", f"http://127.0.0.1:{b_port}"]
        )
        answers = [_chat(port) for _ in range(6)]
        assert sorted(answers) == [(200, "a")] * 3 + [(200, "b")] * 3
        # The engines got their own key, never the client's.
        assert all(h["Authorization"] == f"Bearer {ENGINE_KEY}" for h in a.seen + b.seen)
        gone = f"http://127.0.0.1:{a_port}".replace(":", "%3A").replace("/", "%2F")
        assert call(control, "DELETE", f"/workers/{gone}")[0] == 200
        assert {_chat(port) for _ in range(3)} == {(200, "b")}
        status, text = call(control, "GET", "/metrics")
        assert status == 200 and f'worker="http://127.0.0.1:{b_port}",model="m"' in text
        # The network port has no admin route, whatever the spelling.
        for path in ("/workers", "//workers", "/v1/../workers", "/WORKERS", "/%77orkers"):
            raw = f"POST {path} HTTP/1.1\r\nHost: g\r\nContent-Length: 0\r\n\r\n".encode()
            with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
                connection.sendall(raw)
                assert connection.recv(65536).split(b" ")[1] in (b"404", b"400", b"401")
    finally:
        a.stop()
        b.stop()


def test_a_stranger_on_a_dead_engines_port_is_sent_no_prompt_and_no_key(front, tmp_path: Path):
    """The engine's certificate is pinned: whoever binds its port after it died cannot finish
    a handshake, and the request goes to the engine that is still up."""
    port, control = front
    pinned_port, other_port = free_port(), free_port()
    cert_pem, cert_path, key_path = _identity(tmp_path, "engine")
    pinned = Engine("pinned", pinned_port, tls=(cert_path, key_path))
    other = Engine("other", other_port)
    pinned_url = f"https://127.0.0.1:{pinned_port}"
    body = {"url": pinned_url, "model_id": "m", "cert": cert_pem}
    assert call(control, "POST", "/workers", body)[0] == 200
    assert (
        call(
            control, "POST", "/workers", {"url": f"http://127.0.0.1:{other_port}", "model_id": "m"}
        )[0]
        == 200
    )
    try:
        assert {_chat(port)[1] for _ in range(4)} == {"pinned", "other"}
        pinned.stop()  # the engine dies; a stranger takes its port at once
        stranger = Stranger(pinned_port)
        try:
            answers = [_chat(port) for _ in range(6)]
            time.sleep(1.5)  # let the stranger read whatever it was sent
        finally:
            stranger.stop()
        assert answers == [(200, "other")] * 6
        assert b"POST" not in stranger.received and b"Authorization" not in stranger.received
        assert ENGINE_KEY.encode() not in stranger.received
        assert b"hi" not in stranger.received
        # Out of rotation at its first failed handshake, said so.
        workers = {w["url"]: w for w in json.loads(call(control, "GET", "/workers")[1])["workers"]}
        assert workers[pinned_url]["is_healthy"] is False
        assert workers[pinned_url]["failures"] >= 1
    finally:
        other.stop()


def test_an_impostor_with_a_certificate_of_its_own_is_refused_too(front, tmp_path: Path):
    port, control = front
    engine_port = free_port()
    cert_pem, _, _ = _identity(tmp_path, "real")
    _, fake_cert, fake_key = _identity(tmp_path, "fake")
    impostor = Engine("impostor", engine_port, tls=(fake_cert, fake_key))
    try:
        url = f"https://127.0.0.1:{engine_port}"
        assert (
            call(control, "POST", "/workers", {"url": url, "model_id": "m", "cert": cert_pem})[0]
            == 200
        )
        assert _chat(port)[0] == 503  # no worker is left that proves itself
        assert impostor.seen == []
    finally:
        impostor.stop()


def test_a_worker_that_is_not_one_is_refused_on_the_control_socket(front):
    _, control = front
    for body in (
        {"url": "ftp://x:1", "model_id": "m"},
        {"url": "https://127.0.0.1:1", "model_id": "m"},  # https without a certificate to pin
        {"url": "http://127.0.0.1:1", "model_id": "m", "cert": "not a certificate"},
        {"model_id": "m"},
    ):
        status, text = call(control, "POST", "/workers", body)
        assert status == 400, text
