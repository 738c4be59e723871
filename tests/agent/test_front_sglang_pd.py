"""An SGLang split through the real front and the sim's SGLang workers: sglang-router's PD mode.

SGLang's router does not ask the prefill worker first, as vLLM's does: it sends the request to
a prefill and a decode worker at once, with the prefill worker's `bootstrap_host` and
`bootstrap_port` and a random `bootstrap_room` added; the decode worker waits for that room's
KV. The front speaks it to a model whose prefill workers joined with a bootstrap port, and the
sim's SGLang workers play both sides (they meet in a rooms folder, as the sim's nodes share this
machine).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from http.client import HTTPConnection
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from agent_process import front_process

from llmgw_agent.front.control import call
from llmgw_agent.front.pd import ROOMS, bootstrap_body
from llmgw_agent.front.routing import Worker
from llmgw_agent.sim.engine.args import parse_engine_argv
from llmgw_agent.sim.engine.serving import SimHandler, SimState
from llmgw_agent.sim.engine.transfer import ROOM_STALE_S, bootstrap_of, fill_room, wait_room

CLIENT_KEY = "sk-client-sglang-pd"
SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/llama"]
SGLANG += ["--served-model-name", "llama", "--disaggregation-transfer-backend", "mooncake"]
SGLANG += ["--disaggregation-ib-device", "mlx5_0,mlx5_1"]


class Recorded(SimHandler):
    """The sim's handler, keeping each completion's body it was sent (the test reads them)."""

    bodies: ClassVar[list[dict]] = []

    def _answer(self, route: str, body: object, queued_s: float) -> None:
        self.bodies.append(body)
        super()._answer(route, body, queued_s)


def _sim(role: str) -> tuple[ThreadingHTTPServer, SimState, list[dict]]:
    state = SimState(parse_engine_argv("sglang", [*SGLANG, "--disaggregation-mode", role]), {})
    state.token_s, state.prefill_s, state.kv_gbps = 0.002, 0.0002, 8.0
    state.ready.set()
    bodies: ClassVar[list[dict]] = []
    handler = type("Bound", (Recorded,), {"sim": state, "bodies": bodies})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state, bodies


@pytest.fixture
def split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """A prefill and a decode sim worker of SGLang behind a real front, the prefill worker
    joined with its bootstrap port."""
    monkeypatch.setenv("LLMGW_SIM_ROOMS", str(tmp_path / "rooms"))
    monkeypatch.setenv("LLMGW_SIM_ROOM_WAIT_S", "5")
    prefill, prefill_state, prefill_bodies = _sim("prefill")
    decode, decode_state, decode_bodies = _sim("decode")
    config = {"keys": [{"id": "ops", "key": CLIENT_KEY, "models": None}], "upstream": {}}
    try:
        with front_process(tmp_path, config, "--policy", "round_robin") as (port, control):
            prefill_url = f"http://127.0.0.1:{prefill.server_address[1]}"
            joined = {"url": prefill_url, "model_id": "llama", "role": "prefill"}
            assert call(control, "POST", "/workers", {**joined, "bootstrap_port": 8998})[0] == 200
            decode_url = f"http://127.0.0.1:{decode.server_address[1]}"
            joined = {"url": decode_url, "model_id": "llama", "role": "decode"}
            assert call(control, "POST", "/workers", joined)[0] == 200
            yield {
                "port": port,
                "control": control,
                "prefill": (prefill_state, prefill_bodies),
                "decode": (decode_state, decode_bodies),
            }
    finally:
        for server in (prefill, decode):
            server.shutdown()
            server.server_close()


def _ask(port: int, words: int, stream: bool = False) -> tuple[float, int, bytes]:
    """One chat through the front: (seconds, status, body as it came)."""
    body = json.dumps(
        {
            "model": "llama",
            "messages": [{"role": "user", "content": "w " * words}],
            "max_tokens": 20,
            "stream": stream,
        }
    )
    raw = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {CLIENT_KEY}\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n{body}"
    ).encode()
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(raw)
        answer = b"".join(iter(lambda: connection.recv(65536), b""))
    head, _, payload = answer.partition(b"\r\n\r\n")
    return time.monotonic() - started, int(head.split(b" ")[1]), payload


def test_both_workers_get_the_request_at_once_with_one_room_and_the_prefill_workers_address(
    split: dict,
):
    took, status, payload = _ask(split["port"], 1000)
    assert status == 200, payload
    assert json.loads(payload)["choices"][0]["message"]["content"]
    (prefill_body,) = split["prefill"][1]
    (decode_body,) = split["decode"][1]
    assert prefill_body["bootstrap_room"] == decode_body["bootstrap_room"]
    assert 0 <= decode_body["bootstrap_room"] < 2**63
    assert (decode_body["bootstrap_host"], decode_body["bootstrap_port"]) == ("127.0.0.1", 8998)
    # The prefill leg is read whole and dropped; the decode leg is the client's own.
    assert prefill_body["stream"] is False and decode_body["max_tokens"] == 20
    assert "kv_transfer_params" not in decode_body  # not vLLM's protocol
    # The decode worker read no prompt: it waited for the room's KV (1000 words of 128 KiB)
    # at the path's 8 Gb/s, after the prefill worker's 0.2 s of prompt.
    decode_state = split["decode"][0]
    assert decode_state.kv_received_bytes == json.loads(payload)["usage"]["prompt_tokens"] * 131072
    assert took > 0.2 + decode_state.kv_received_s
    assert split["prefill"][0].kv_received_bytes == 0


def test_a_streamed_answer_comes_from_the_decode_worker_as_it_writes_it(split: dict):
    _, status, payload = _ask(split["port"], 50, stream=True)
    assert status == 200
    assert payload.rstrip().endswith(b"data: [DONE]")
    assert split["decode"][1][0]["stream"] is True and split["prefill"][1][0]["stream"] is False
    assert split["decode"][0].kv_received_bytes > 0


def test_a_decode_worker_whose_room_never_fills_answers_500_with_the_room(
    split: dict, monkeypatch: pytest.MonkeyPatch
):
    """A prefill worker that died after the request was sent leaves its room empty: the
    decode worker says which room, not a hang."""
    monkeypatch.setenv("LLMGW_SIM_ROOM_WAIT_S", "0.2")
    decode_state = split["decode"][0]
    listed = json.loads(call(split["control"], "GET", "/workers")[1])["workers"]
    decode_url = next(w["url"] for w in listed if w["role"] == "decode")
    host, port = decode_url.rsplit("/", 1)[1].split(":")
    # The decode worker asked directly: no prefill worker fills the room.
    connection = HTTPConnection(host, int(port), timeout=10)
    body = {"model": "llama", "prompt": "hi", "max_tokens": 3}
    body.update(bootstrap_host="127.0.0.1", bootstrap_port=8998, bootstrap_room=12345)
    connection.request("POST", "/v1/completions", json.dumps(body))
    answer = connection.getresponse()
    said = json.loads(answer.read())
    assert answer.status == 500
    assert said["error"]["message"] == (
        "the KV of bootstrap room 12345 never came from 127.0.0.1:8998"
    )
    assert decode_state.kv_received_bytes == 0


def test_the_front_lists_a_prefill_workers_bootstrap_port_and_refuses_one_on_a_decode_worker(
    split: dict,
):
    listed = json.loads(call(split["control"], "GET", "/workers")[1])["workers"]
    assert {w["role"]: w["bootstrap_port"] for w in listed} == {"prefill": 8998, "decode": None}
    status, text = call(
        split["control"],
        "POST",
        "/workers",
        {"url": "http://127.0.0.1:1", "model_id": "llama", "role": "decode", "bootstrap_port": 1},
    )
    assert status == 400 and "a bootstrap port is a prefill worker's port number" in text
    with pytest.raises(ValueError, match="1 to 65535"):
        Worker("http://127.0.0.1:1", "m", role="prefill", bootstrap_port=70000)


@pytest.mark.parametrize(
    "body",
    [
        {"bootstrap_host": "h", "bootstrap_port": 8998, "bootstrap_room": -1},
        {"bootstrap_host": "h", "bootstrap_port": 8998, "bootstrap_room": ROOMS},
        {"bootstrap_host": "h", "bootstrap_port": True, "bootstrap_room": 1},
        {"bootstrap_host": "", "bootstrap_port": 8998, "bootstrap_room": 1},
        {"bootstrap_host": "h", "bootstrap_port": "8998", "bootstrap_room": 1},
        {"bootstrap_port": 8998, "bootstrap_room": 1},
        ["not", "an", "object"],
    ],
)
def test_a_request_with_no_whole_bootstrap_is_no_room_for_the_sim(body):
    assert bootstrap_of(body) is None


def test_the_bootstrap_fields_are_added_as_sglangs_router_adds_them():
    sent = json.loads(bootstrap_body(b'{"model": "m", "stream": true}', "fe80::1", 8998, 7))
    assert sent == {
        "model": "m",
        "stream": True,
        "bootstrap_host": "[fe80::1]",
        "bootstrap_port": 8998,
        "bootstrap_room": 7,
    }
    assert bootstrap_of(sent) == ("[fe80::1]", 8998, 7)
    assert bootstrap_body(b"[1]", "h", 8998, 7) is None


def test_a_room_no_decode_worker_took_is_cleared_when_a_later_one_is_filled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The prefill leg runs even when the decode leg then finds no worker: its room would stay
    in the folder for good."""
    monkeypatch.setenv("LLMGW_SIM_ROOMS", str(tmp_path))
    fill_room(8998, 1, {"kv_bytes": 1})
    old = time.time() - ROOM_STALE_S - 1
    os.utime(tmp_path / "8998-1.json", (old, old))
    fill_room(8998, 2, {"kv_bytes": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["8998-2.json"]
    assert wait_room(8998, 2, 0.1) == {"kv_bytes": 2} and list(tmp_path.iterdir()) == []
