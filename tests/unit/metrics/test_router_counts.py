"""What a gateway's front counts: requests and failures per worker, its own refusals in all.

A real front runs here in front of one real HTTP server that refuses every
completion (Python's `http.server` answers POST with 501), so each request
is sent, counted, and counted as failed; one request without a key is the
front's own refusal.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from engine_process import end_process

from llmgw_agent.front.control import call
from llmgw_core.metrics.gateway import GatewayScrape, GatewayTarget, router_counts

KEY = "sk-counts-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{process.args[0]} ended with {process.returncode}")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within {timeout_s:g} s")


@pytest.fixture
def front_and_worker(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(the front's URL, its control socket, the worker's URL); both processes end afterwards."""
    port, worker_port = _free_port(), _free_port()
    control = str(tmp_path / "front.sock")
    worker = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(worker_port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    config = {"keys": [{"id": "ops", "key": KEY}], "upstream": {}}
    front = subprocess.Popen(
        [
            *(sys.executable, "-m", "llmgw_agent", "front"),
            *("--listen", f"127.0.0.1:{port}", "--control", control),
        ],
        env={**os.environ, "LLMGW_FRONT_CONFIG": json.dumps(config)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for(base + "/liveness", front)
        _wait_for(f"http://127.0.0.1:{worker_port}/", worker)
        yield base, control, f"http://127.0.0.1:{worker_port}"
    finally:
        for process in (front, worker):
            end_process(process, 10)


def test_three_refused_completions_are_three_requests_three_failures_and_one_refusal(
    front_and_worker,
):
    base, control, worker_url = front_and_worker
    assert call(control, "POST", "/workers", {"url": worker_url, "model_id": "m"})[0] == 200
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {KEY}"}
    for _ in range(3):
        answer = httpx.post(base + "/v1/chat/completions", json=body, headers=headers, timeout=10)
        assert answer.status_code == 501
    assert httpx.post(base + "/v1/chat/completions", json=body, timeout=10).status_code == 401
    status, text = call(control, "GET", "/metrics")
    assert status == 200
    target = GatewayTarget(name="front", node="here", front=True, shard_id="gateway-front")
    counts = router_counts(GatewayScrape(target, text=text))
    assert counts is not None
    assert dict(counts.requests) == {worker_url: 3.0}
    assert dict(counts.failures) == {worker_url: 3.0}
    assert counts.errors == 1.0  # the keyless request: the front's own refusal


def test_a_scrape_without_text_has_no_counts_and_text_that_is_not_prometheus_is_refused():
    target = GatewayTarget(name="front", node="here", port=9000)
    assert router_counts(GatewayScrape(target, error="front on here did not answer")) is None
    with pytest.raises(ValueError):
        router_counts(GatewayScrape(target, text="<html>not metrics</html>\n"))
