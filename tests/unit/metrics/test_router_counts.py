"""What a real vllm-router counts: requests and failures per worker, errors in all.

The router runs here on loopback in front of one real HTTP server that
refuses every completion (Python's `http.server` answers POST with 501), so
each request is sent, counted, and counted as failed.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from llmgw_core.fleet.sim.demo import demo_router
from llmgw_core.metrics.gateway import GatewayScrape, GatewayTarget, router_counts

pytestmark = pytest.mark.skipif(
    demo_router() is None, reason="vllm-router is not installed (test extra)"
)


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
def router_and_worker() -> Iterator[tuple[str, int, str]]:
    """(router URL, its metrics port, the worker's URL); both processes end afterwards."""
    router_port, metrics_port, worker_port = _free_port(), _free_port(), _free_port()
    worker = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(worker_port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    router = subprocess.Popen(
        [
            str(demo_router()),
            *("--host", "127.0.0.1", "--port", str(router_port), "--enable-igw"),
            *("--policy", "round_robin", "--prometheus-host", "127.0.0.1"),
            *("--prometheus-port", str(metrics_port), "--log-level", "warning"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{router_port}"
        _wait_for(base + "/liveness", router)
        _wait_for(f"http://127.0.0.1:{worker_port}/", worker)
        yield base, metrics_port, f"http://127.0.0.1:{worker_port}"
    finally:
        for process in (router, worker):
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def test_three_refused_completions_are_three_requests_three_failures_and_three_errors(
    router_and_worker,
):
    base, metrics_port, worker_url = router_and_worker
    added = httpx.post(base + "/workers", json={"url": worker_url, "model_id": "m"}, timeout=10)
    assert added.status_code == 200, added.text
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(3):
        answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=10)
        assert answer.status_code >= 400
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    target = GatewayTarget(name="front", node="here", port=metrics_port)
    counts = router_counts(GatewayScrape(target, text=text))
    assert counts is not None
    assert dict(counts.requests) == {worker_url: 3.0}
    assert dict(counts.failures) == {worker_url: 3.0}
    assert counts.errors == 3.0


def test_a_scrape_without_text_has_no_counts_and_text_that_is_not_prometheus_is_refused():
    target = GatewayTarget(name="front", node="here", port=9000)
    assert router_counts(GatewayScrape(target, error="front on here did not answer")) is None
    with pytest.raises(ValueError):
        router_counts(GatewayScrape(target, text="<html>not metrics</html>\n"))
