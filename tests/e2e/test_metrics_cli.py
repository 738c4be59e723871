"""`llmgw-tui --run` with a `metrics` step, as an operator runs it: signals, exit codes, sentences.

The fleet is one node nobody answers for (a closed loopback port), so the
process starts fast and the endpoint shows a node that is down.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from llmgw_tui.cli import main; sys.exit(main())"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _fleet_of_one_lost_node(tmp_path: Path) -> Path:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "nodes:\n"
        f"  - {{name: lost-01, host: 127.0.0.1, port: {_free_port()}}}\n"
        f"known_hosts: {known_hosts}\n"
    )
    return inventory


def _run(tmp_path: Path, script: str, **popen: object) -> subprocess.Popen[str]:
    path = tmp_path / "script.yaml"
    path.write_text(script)
    inventory = _fleet_of_one_lost_node(tmp_path)
    return subprocess.Popen(
        [*CLI, "--inventory", str(inventory), "--run", str(path), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "HOME": str(tmp_path)},
        **popen,
    )


def _scrape_until(port: int, needle: str, process: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        except httpx.HTTPError:
            text = ""
        if needle in text:
            return text
        time.sleep(0.2)
    process.kill()
    out, err = process.communicate()
    raise AssertionError(f"no {needle} was served: {out} {err}")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_metrics_step_cleanly_with_exit_0(tmp_path: Path, signum: int):
    port = _free_port()
    process = _run(tmp_path, f"steps:\n  - metrics: {{port: {port}, interval_s: 0.5}}\n")
    try:
        text = _scrape_until(port, 'llmgw_node_up{node="lost-01"}', process)
        families = {f.name: f.samples for f in text_string_to_metric_families(text)}
        (up,) = families["llmgw_node_up"]
        assert up.value == 0
        states = {s.labels["state"]: s.value for s in families["llmgw_node_state"]}
        assert states == {"connecting": 0, "ready": 0, "unreachable": 1, "refused": 0}
        process.send_signal(signum)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, out + err
    (line,) = [json.loads(text) for text in out.splitlines() if text.strip()]
    assert line["ok"] and line["result"]["interrupted"] is True
    assert line["result"]["url"] == f"http://127.0.0.1:{port}/metrics"
    assert "Traceback" not in err
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_a_port_already_taken_is_one_sentence_and_exit_2(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = _run(tmp_path, f"steps:\n  - metrics: {{port: {port}, for_s: 5}}\n")
        out, err = process.communicate(timeout=60)
    assert process.returncode == 2, out + err
    (line,) = [json.loads(text) for text in out.splitlines() if text.strip()]
    assert line["error"].startswith(f"cannot serve metrics on 127.0.0.1:{port}: ")
    assert "choose another --metrics-port" in line["error"]
    assert "Traceback" not in err


def test_a_gateway_on_a_node_outside_the_inventory_is_named(tmp_path: Path):
    script = "steps:\n  - metrics: {port: 0, gateways: [{name: gw, node: nowhere, port: 29000}]}\n"
    process = _run(tmp_path, script)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 2, out + err
    (line,) = [json.loads(text) for text in out.splitlines() if text.strip()]
    assert line["error"] == (
        "gateway gw is on 'nowhere', which is not in the inventory: the nodes are lost-01"
    )
