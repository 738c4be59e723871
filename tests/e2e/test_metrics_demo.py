"""The `metrics` step on the demo fleet: a real scrape, parsed with prometheus_client's parser.

One demo fleet for the module. A replica is served and a fabric test run
first (its verdicts are kept by the nodes and exported from their facts); a local HTTP server plays a gateway named in the step, and a process
the CPU node's agent supervises as a gateway shard plays one the step must
find by itself (both reached through real SSH tunnels). Then the step
serves while this test scrapes it over HTTP.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from serve_demo_harness import Demo, step

from llmgw_core.fleet.sim.demo import DEGRADED_TRAY, NOT_JOINED_TRAY

pytestmark = pytest.mark.slow

LLAMA = "catalog:meta-llama/Llama-3.3-70B-Instruct"
ROUTER_TEXT = """\
# HELP vllm_router_requests_total Requests the router handled.
# TYPE vllm_router_requests_total counter
vllm_router_requests_total{route="/v1/chat/completions"} 12
vllm_router_requests_total{route="/v1/models"} 3
# HELP vllm_router_request_errors_total Requests that ended in an error.
# TYPE vllm_router_request_errors_total counter
vllm_router_request_errors_total{route="/v1/chat/completions",error_type="backend_5xx"} 2
# HELP vllm_router_workers Healthy workers behind the router.
# TYPE vllm_router_workers gauge
vllm_router_workers{gateway="inner"} 1
"""

# Every family the endpoint must show on the demo fleet, with its labels.
EXPECTED_LABELS = {
    "llmgw_node_up": {"node"},
    "llmgw_node_state": {"node", "state"},
    "llmgw_node_last_seen_timestamp_seconds": {"node"},
    "llmgw_snapshot_timestamp_seconds": set(),
    "llmgw_gpu_info": {"node", "gpu", "class", "name"},
    "llmgw_gpu_memory_used_bytes": {"node", "gpu"},
    "llmgw_gpu_memory_total_bytes": {"node", "gpu"},
    "llmgw_gpu_utilization_ratio": {"node", "gpu"},
    "llmgw_gpu_nvlink_joined": {"node", "gpu"},
    "llmgw_gpu_nvlink_degraded": {"node", "gpu"},
    "llmgw_imex_up": {"node"},
    "llmgw_replicas": {"phase"},
    "llmgw_replica_phase": {"replica", "model", "engine", "phase"},
    "llmgw_replica_shards": {"replica"},
    "llmgw_replica_ready_shards": {"replica"},
    "llmgw_fabric_rail_verdict": {"node", "peer", "adapter", "rail", "verdict"},
    "llmgw_fabric_rail_ratio": {"node", "peer", "adapter", "rail"},
    "llmgw_fabric_rail_measured_bytes_per_second": {"node", "peer", "adapter", "rail"},
    "llmgw_fabric_rail_rated_bytes_per_second": {"node", "peer", "adapter", "rail"},
    "llmgw_fabric_rail_measured_timestamp_seconds": {"node", "peer", "adapter", "rail"},
    "llmgw_gateway_up": {"gateway", "node"},
    "vllm_router_requests": {"route", "gateway", "node"},
    "vllm_router_request_errors": {"route", "error_type", "gateway", "node"},
    "vllm_router_workers": {"exported_gateway", "gateway", "node"},
}


class _Router(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = ROUTER_TEXT.encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    running = Demo(tmp_path_factory.mktemp("metrics-demo"))
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def router() -> Iterator[int]:
    """A gateway's Prometheus port on this machine (the demo nodes' loopback is this one)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Router)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_gateway_shard(demo: Demo, node: str, name: str, port: int) -> str:
    """A gateway's front (no key, no worker) started by the node's agent; its shard id."""
    spec = {"kind": "llmgw-gateway", "gateway": {"name": name, "port": port}}
    args = {
        "replica": f"gateway-{name}",
        "rank": 0,
        "commands": [
            {
                "name": "front",
                "argv": ["front", "--listen", f"127.0.0.1:{port}"],
                "agent": True,
                "role": "main",
            }
        ],
        "spec": spec,
    }
    started = demo.loop.run(demo.fleet.request(node, "shard.start", args))
    shard_id = started["shard_id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = demo.loop.run(demo.fleet.request(node, "shard.list"))
        (record,) = [r for r in listed["shards"] if r["shard_id"] == shard_id]
        if record["phase"] == "running":
            return shard_id
        assert record["phase"] == "starting", record
        time.sleep(0.3)
    raise AssertionError("the gateway shard never ran")


def _scrape_while_serving(demo: Demo, **args: Any) -> tuple[str, Any]:
    """Run the step on the demo's loop; scrape once its first snapshot is in; its outcome."""
    port = args["port"]
    running = asyncio.run_coroutine_threadsafe(step(demo.ctx, "metrics", **args), demo.loop.loop)
    text = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "llmgw_node_up{" not in text:
        time.sleep(0.3)
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        except httpx.HTTPError:
            continue
    return text, running.result(120)


def _promtool_finds_nothing(text: str) -> None:
    """Prometheus's own linter on what the endpoint served (where promtool is installed:
    Debian's `prometheus` package has it, and `.ci/run` installs it)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool is not installed: the exposition was not linted")
        return
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), (
        done.stdout + done.stderr
    )


def _samples(text: str) -> dict[str, list[Any]]:
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def _value(samples: list[Any], suffix: str = "", **labels: str) -> float:
    (found,) = [
        s
        for s in samples
        if s.name.endswith(suffix) and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return found.value


def test_every_family_is_exported_with_its_labels_and_the_facts_of_the_demo_fleet(
    demo: Demo, router: int, tmp_path: Path
):
    served = demo.step("serve", model=LLAMA, context=32768, gpu_class="h100-80g", name="llama")
    assert served.ok, served.error
    tested_from = time.time()
    tested = demo.step("fabric-test", nodes=["h100-a-01", "h100-a-02"], duration_s=0.5)
    tested_until = time.time()
    assert tested.result["rails"], tested.error
    closed = _free_port()
    found_port = _free_port()
    shard_id = _start_gateway_shard(demo, "cpu-01", "gw-found", found_port)
    deadline = time.monotonic() + 30
    while True:  # one request with no worker to take it: counted by the front
        try:
            refused = httpx.post(f"http://127.0.0.1:{found_port}/v1/chat/completions", json={})
            break
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "the gateway's front never answered"
            time.sleep(0.2)
    assert refused.status_code == 503
    text, outcome = _scrape_while_serving(
        demo,
        port=_free_port(),
        interval_s=1,
        for_s=8,
        gateways=[
            {"name": "gw-a", "node": "h100-a-01", "port": router},
            {"name": "gw-gone", "node": "l40s-01", "port": closed},
        ],
    )
    assert outcome.ok and outcome.result["refreshes"] >= 1, outcome
    assert "gw-gone" in outcome.result["gateways_unread"]

    _promtool_finds_nothing(text)
    families = _samples(text)
    for name, labels in EXPECTED_LABELS.items():
        assert families.get(name), f"{name} is missing"
        for sample in families[name]:
            assert set(sample.labels) == labels, (name, sample.labels)

    snapshot = demo.fleet.snapshot()
    up = families["llmgw_node_up"]
    assert {s.labels["node"] for s in up} == set(snapshot.nodes)
    assert all(s.value == 1 for s in up)

    card = snapshot.nodes["h100-a-01"].facts.cards[0]
    assert (
        _value(families["llmgw_gpu_memory_total_bytes"], node="h100-a-01", gpu="0")
        == card.memory_mib * 2**20
    )
    claimed = served.result["placement"]["nodes"][0]["gpus"]
    assert _value(families["llmgw_gpu_memory_used_bytes"], node="h100-a-01", gpu=claimed[0]) > 0

    joined = families["llmgw_gpu_nvlink_joined"]
    not_joined = f"gb200-r1-t{NOT_JOINED_TRAY:02d}"
    degraded = f"gb200-r1-t{DEGRADED_TRAY:02d}"
    assert {s.value for s in joined if s.labels["node"] == not_joined} == {0.0}
    assert {s.value for s in joined if s.labels["node"] == "gb200-r1-t01"} == {1.0}
    assert not [s for s in joined if s.labels["node"].startswith("h100")]
    flagged = families["llmgw_gpu_nvlink_degraded"]
    assert {s.value for s in flagged if s.labels["node"] == degraded} == {1.0}
    assert {s.labels["node"] for s in families["llmgw_imex_up"]} == {
        name for name in snapshot.nodes if name.startswith("gb200")
    }

    assert _value(families["llmgw_replicas"], phase="ready") == 1
    assert _value(families["llmgw_replicas"], phase="failed") == 0
    assert _value(families["llmgw_replica_ready_shards"], replica="llama") == 1
    assert _value(families["llmgw_replica_phase"], replica="llama", phase="ready") == 1

    judged = [row for row in tested.result["rails"] if row["method"] == "ib_write_bw"]
    assert judged and tested.result["recorded"] == ["h100-a-01", "h100-a-02"]
    verdicts = families["llmgw_fabric_rail_verdict"]
    for row in judged:
        for node, adapter, peer in (
            (row["node_a"], row["adapter_a"], row["node_b"]),
            (row["node_b"], row["adapter_b"], row["node_a"]),
        ):
            end = {"node": node, "peer": peer, "adapter": adapter, "rail": str(row["rail"])}
            assert _value(verdicts, verdict=row["verdict"], **end) == 1
            ratio = _value(families["llmgw_fabric_rail_ratio"], **end)
            assert ratio == pytest.approx(row["ratio"], abs=1e-3)
            when = _value(families["llmgw_fabric_rail_measured_timestamp_seconds"], **end)
            assert tested_from <= when <= tested_until
    assert len([s for s in verdicts if s.value == 1]) == 2 * len(judged)

    assert _value(families["llmgw_gateway_up"], gateway="gw-a") == 1
    assert _value(families["llmgw_gateway_up"], gateway="gw-found", node="cpu-01") == 1
    found = {"gateway": "gw-found", "node": "cpu-01", "key": "-", "outcome": "no_worker"}
    assert _value(families["llmgw_gateway_requests"], "_total", **found) == 1
    assert _value(families["llmgw_gateway_up"], gateway="gw-gone") == 0
    chat = {"gateway": "gw-a", "node": "h100-a-01", "route": "/v1/chat/completions"}
    assert _value(families["vllm_router_requests"], "_total", **chat) == 12
    assert _value(families["vllm_router_request_errors"], "_total", **chat) == 2

    stopped = demo.step("stop", replica="llama")
    assert stopped.ok, stopped.error
    demo.loop.run(
        demo.fleet.request("cpu-01", "shard.stop", {"shard_id": shard_id, "timeout_s": 10})
    )
