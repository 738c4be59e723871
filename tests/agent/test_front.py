"""The gateway's front as a real process, at the level of HTTP bytes (no worker behind it).

What the demo's gateway tests cannot see: how it frames what it refuses, a
client that waits for `100 Continue`, a body it will not take, and a keyed
request with no worker to take it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import agent_env, front_process

from llmgw_agent.front.control import call

KEY = "sk-front-test-0123456789"


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str]]:
    config = {"keys": [{"id": "ops", "key": KEY, "models": None}], "upstream": {}}
    with front_process(tmp_path_factory.mktemp("front"), config) as running:
        yield running


def _exchange(port: int, raw: bytes, *, read_until_close: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(raw)
        if not read_until_close:
            return connection.recv(65536)
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_a_keyed_client_waiting_for_100_continue_gets_it_before_sending_its_body(front):
    port, _control = front
    body = json.dumps({"model": "m", "prompt": "x" * 5000}).encode()
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\nConnection: close\r\n"
        f"Authorization: Bearer {KEY}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(head)
        assert connection.recv(1024).startswith(b"HTTP/1.1 100 Continue\r\n")
        connection.sendall(body)
        answer = b"".join(iter(lambda: connection.recv(65536), b""))
    assert answer.startswith(b"HTTP/1.1 404 ")  # no worker serves `m`: the body was read


def test_a_keyless_client_waiting_for_100_continue_is_refused_without_sending_its_body(front):
    port, _control = front
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
        b"Content-Length: 5000\r\nExpect: 100-continue\r\n\r\n"
    )
    answer = _exchange(port, head)
    assert answer.startswith(b"HTTP/1.1 401 ")
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["type"] == "invalid_request_error" and "API key" in error["message"]


def test_what_the_front_will_not_take_is_answered_and_closed(front):
    port, _metrics = front
    chunked = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n"
    )
    assert _exchange(port, chunked).startswith(b"HTTP/1.1 411 ")
    huge = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 99999999999\r\n"
        f"Authorization: Bearer {KEY}\r\n\r\n"
    ).encode()
    assert _exchange(port, huge).startswith(b"HTTP/1.1 413 ")
    assert _exchange(port, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    admin = b"POST /workers HTTP/1.1\r\nHost: g\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    assert _exchange(port, admin).startswith(b"HTTP/1.1 404 ")


def test_a_keyed_request_with_no_worker_to_take_it_gets_a_503(front):
    port, control = front
    request = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 2\r\n"
        f"Authorization: Bearer {KEY}\r\nConnection: close\r\n\r\n{{}}"
    ).encode()
    assert _exchange(port, request).startswith(b"HTTP/1.1 503 ")
    health = b"GET /health HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n"
    assert _exchange(port, health).startswith(b"HTTP/1.1 503 ")  # no worker is healthy
    assert call(control, "GET", "/liveness")[0] == 200
    status, counted = call(control, "GET", "/metrics")
    assert status == 200
    assert 'llmgw_gateway_requests_total{key="ops",outcome="no_worker"} 1' in counted
    assert KEY not in counted


def test_the_control_socket_is_the_operators_alone(front):
    _, control = front
    assert os.stat(control).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(control)).st_mode & 0o777 == 0o700


def test_a_certificate_that_is_not_one_stops_the_front_with_a_sentence(tmp_path: Path):
    config = {"keys": [], "upstream": {}, "tls": {"cert": "not pem", "key": "not pem"}}
    done = subprocess.run(
        [
            *(sys.executable, "-S", "-m", "llmgw_agent", "front", "--listen", "127.0.0.1:0"),
            *("--control", str(tmp_path / "front.sock")),
        ],
        env=agent_env(tmp_path / "state", LLMGW_FRONT_CONFIG=json.dumps(config)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("llmgw front: the certificate or its key is not usable")
