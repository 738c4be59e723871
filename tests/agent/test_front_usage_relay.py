"""The front reads each answer's tokens from a worker that streams as uvicorn does (chunked).

A worker on loopback answers a stream in HTTP/1.1 chunks, split mid-event, as
vLLM's uvicorn does; the front (a real process) sits before it with a key
whose tokens per minute it must count. The client that did not ask for the
usage gets none, the one that asked gets it as the worker sent it, and the
front's counters hold both answers' tokens; once over the limit, 429.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from agent_process import front_process

from llmgw_agent.front.control import call

KEY = "sk-usage-relay-0123456789"
PROMPT = "a canary prompt 7f3e"


class _Worker(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    asked: ClassVar[list[dict]] = []
    heads: ClassVar[list[dict]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._send(200, b"{}")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Worker.asked.append(body)
        _Worker.heads.append(dict(self.headers))
        usage = (body.get("stream_options") or {}).get("include_usage") is True
        words = ["Hello", " there"]
        events = [
            {
                "choices": [{"index": 0, "delta": {"content": w}}],
                **({"usage": None} if usage else {}),
            }
            for w in words
        ]
        if usage:
            events.append({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}})
        stream = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        stream += b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for start in range(0, len(stream), 11):  # chunks that cut events apart
            piece = stream[start : start + 11]
            self.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def front(tmp_path: Path) -> Iterator[tuple[int, str]]:
    worker = ThreadingHTTPServer(("127.0.0.1", 0), _Worker)
    threading.Thread(target=worker.serve_forever, daemon=True).start()
    config = {
        "keys": [{"id": "team", "key": KEY, "models": None, "limits": {"tokens_per_min": 15}}],
        "upstream": {},
    }
    url = f"http://127.0.0.1:{worker.server_address[1]}"
    try:
        with front_process(tmp_path, config) as (port, control):
            assert call(control, "POST", "/workers", {"url": url, "model_id": "m"})[0] == 200
            deadline = time.monotonic() + 30
            while not json.loads(call(control, "GET", "/workers")[1])["workers"][0]["is_healthy"]:
                assert time.monotonic() < deadline, "the worker never passed its health check"
                time.sleep(0.1)
            yield port, control
    finally:
        worker.shutdown()


def _stream(
    port: int, sent: dict[str, str] | None = None, **more: object
) -> tuple[int, list[dict], dict[str, str]]:
    body = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "stream": True, **more}
    with httpx.Client(timeout=20) as http:
        answer = http.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {KEY}", **(sent or {})},
        )
    events = [
        json.loads(line[len("data: ") :])
        for line in answer.text.split("\n")
        if line.startswith("data: {")
    ]
    return answer.status_code, events, dict(answer.headers)


def test_a_chunked_streams_tokens_are_counted_and_only_the_client_that_asked_sees_them(front):
    port, control = front
    _Worker.asked.clear()
    status, events, _ = _stream(port)
    assert status == 200
    assert [e["choices"][0]["delta"]["content"] for e in events] == ["Hello", " there"]
    assert all("usage" not in e for e in events)  # asked for by the front, taken out again
    assert _Worker.asked[-1]["stream_options"] == {"include_usage": True}

    status, events, _ = _stream(port, stream_options={"include_usage": True})
    assert status == 200 and events[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 2}
    assert [e.get("usage", "absent") for e in events[:-1]] == [None, None]  # as the worker sent

    counted = call(control, "GET", "/metrics")[1]
    assert 'llmgw_gateway_tokens_total{key="team",model="m",kind="prompt"} 14' in counted
    assert 'llmgw_gateway_tokens_total{key="team",model="m",kind="completion"} 4' in counted
    status, events, headers = _stream(port)  # 18 tokens of 15 this minute
    assert status == 429 and int(headers["retry-after"]) <= 60
    counted = call(control, "GET", "/metrics")[1]
    assert 'llmgw_gateway_limited_total{key="team",limit="tokens_per_min"} 1' in counted
    assert KEY not in counted


def test_each_request_has_an_id_both_ends_see_and_a_line_in_the_access_log(front):
    port, control = front
    _Worker.heads.clear()
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    status, _, headers = _stream(
        port, {"X-Request-Id": "client-chose-this-1", "traceparent": trace}
    )
    assert status == 200 and headers["x-request-id"] == "client-chose-this-1"
    assert _Worker.heads[-1]["X-Request-Id"] == "client-chose-this-1"
    assert _Worker.heads[-1]["traceparent"] == trace
    # An id that is not a plain token is replaced, not passed on.
    status, _, headers = _stream(port, {"X-Request-Id": "a b\tc" + "x" * 200})
    made = headers["x-request-id"]
    assert status == 200 and len(made) == 32 and int(made, 16) >= 0
    assert _Worker.heads[-1]["X-Request-Id"] == made
    status, _, headers = _stream(port)  # over its tokens per minute: refused, still an id
    assert status == 429 and len(headers["x-request-id"]) == 32

    log = Path(control).parent / "access.log"
    assert os.stat(log).st_mode & 0o777 == 0o600
    deadline = time.monotonic() + 10  # a line is written once its answer has gone
    while len(log.read_text().splitlines()) < 3:
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["id"] for line in lines[:2]] == ["client-chose-this-1", made]
    assert [line["status"] for line in lines] == [200, 200, 429]
    assert all(line["key"] == "team" and line["model"] == "m" for line in lines)
    assert lines[0]["worker"].startswith("http://127.0.0.1:") and lines[2]["worker"] is None
    assert (lines[0]["prompt_tokens"], lines[0]["completion_tokens"]) == (7, 2)
    assert 0 < lines[0]["ttft_s"] <= lines[0]["duration_s"]
    text = log.read_text()
    assert KEY not in text and PROMPT not in text  # no key, no prompt

    summed = json.loads(call(control, "GET", "/usage")[1])["usage"]
    (day,) = summed
    assert (day["key"], day["model"], day["requests"], day["answered"]) == ("team", "m", 3, 2)
    assert (day["prompt_tokens"], day["completion_tokens"]) == (14, 4)
    counted = call(control, "GET", "/metrics")[1]
    assert f'kind="prompt"}} {day["prompt_tokens"]}' in counted
    assert f'kind="completion"}} {day["completion_tokens"]}' in counted
