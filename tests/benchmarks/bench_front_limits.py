"""Benchmark: what a key's limits and the access log cost at the gateway's front.

Run: `.venv/bin/python tests/benchmarks/bench_front_limits.py`. Prints figures; asserts nothing.

One real front (`llmgw front`, its store and access log in a temporary state
folder) before a worker on loopback that answers at once as an engine does
(a whole chat completion with `usage`, or a chunked stream with the usage
chunk when asked). Two client keys: `open` (no limits) and `limited` (every
limit set, none reached: a bucket of requests, requests at once, tokens per
minute and a budget, so each answer's tokens are read and counted and the
budget kept). The same client (httpx, keep-alive, `CONCURRENCY` at a time)
sends `REQUESTS` requests with each key in alternating rounds; the median
round is shown. Every request of either key leaves an access-log line.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import _paths  # noqa: F401  (tests/support on the path)
import httpx
from agent_process import front_process

from llmgw_agent.front.control import call

REQUESTS = 400
CONCURRENCY = 8
ROUNDS = 3
OPEN, LIMITED = "sk-bench-open-0123456789", "sk-bench-limited-01234567"


class _Engine(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # the head and the body go out at once, as uvicorn sends them

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._whole(b"{}")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        usage = {"prompt_tokens": 24, "completion_tokens": 12, "total_tokens": 36}
        if not body.get("stream"):
            answer = {"choices": [{"index": 0, "message": {"content": "hi " * 12}}], "usage": usage}
            self._whole(json.dumps(answer).encode())
            return
        asked = (body.get("stream_options") or {}).get("include_usage") is True
        events = [
            {
                "choices": [{"index": 0, "delta": {"content": "hi "}}],
                **({"usage": None} if asked else {}),
            }
            for _ in range(12)
        ]
        if asked:
            events.append({"choices": [], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in [*(f"data: {json.dumps(e)}\n\n" for e in events), "data: [DONE]\n\n"]:
            data = event.encode()
            self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def _whole(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _round(port: int, key: str, stream: bool) -> tuple[float, float, float]:
    """(requests a second, p50 s, p99 s) of one round."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    latencies: list[float] = []
    with httpx.Client(
        timeout=30, limits=httpx.Limits(max_keepalive_connections=CONCURRENCY)
    ) as http:

        def one(_: int) -> None:
            started = time.perf_counter()
            answer = http.post(url, json=body, headers={"Authorization": f"Bearer {key}"})
            assert answer.status_code == 200, answer.text
            latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            list(pool.map(one, range(REQUESTS)))
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return REQUESTS / elapsed, ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.99) - 1]


def main() -> None:
    engine = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    limits = {
        "requests_per_s": 1_000_000,
        "concurrent": 10_000,
        "tokens_per_min": 10**12,
        "budget_tokens": 10**15,
        "budget_per": "month",
    }
    config = {
        "keys": [
            {"id": "open", "key": OPEN, "models": None},
            {"id": "limited", "key": LIMITED, "models": None, "limits": limits},
        ],
        "upstream": {},
        "store": "bench",
    }
    with tempfile.TemporaryDirectory() as folder, front_process(Path(folder), config) as front:
        port, control = front
        url = f"http://127.0.0.1:{engine.server_address[1]}"
        call(control, "POST", "/workers", {"url": url, "model_id": "m"})
        while not json.loads(call(control, "GET", "/workers")[1])["workers"][0]["is_healthy"]:
            time.sleep(0.1)
        print(f"{REQUESTS} requests a round, {CONCURRENCY} at a time, median of {ROUNDS} rounds")
        print(f"{'':28} {'requests/s':>11} {'p50 ms':>8} {'p99 ms':>8}")
        for stream in (False, True):
            figures: dict[str, list[tuple[float, float, float]]] = {"open": [], "limited": []}
            for _ in range(ROUNDS):
                for name, key in (("open", OPEN), ("limited", LIMITED)):
                    figures[name].append(_round(port, key, stream))
            for name, rounds in figures.items():
                rate, p50, p99 = (statistics.median(f[i] for f in rounds) for i in range(3))
                what = f"{'stream' if stream else 'whole'}, key {name}"
                print(f"{what:28} {rate:11.0f} {p50 * 1000:8.1f} {p99 * 1000:8.1f}")
        counted = call(control, "GET", "/metrics")[1]
        tokens = sum(
            float(line.rsplit(" ", 1)[1])
            for line in counted.splitlines()
            if line.startswith('llmgw_gateway_tokens_total{key="limited"')
        )
        used = json.loads(call(control, "GET", "/usage")[1])["usage"]
        logged = sum(row["requests"] for row in used)
        print(f"tokens counted for key limited: {tokens:.0f}; access-log lines: {logged}")
        log = Path(folder) / "state" / "gateways" / "bench" / "access.log"
        print(f"access log: {log.stat().st_size / logged:.0f} bytes a request")
    engine.shutdown()


if __name__ == "__main__":
    main()
