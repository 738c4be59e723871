"""A second Unix user of the node gets nothing: no socket, no port, no file, no process, no squat.

The demo fleet's nodes are this machine, so a real second account
(`useradd`, then `runuser`) is a co-tenant of every node and of the
console's own machine at once. Two keyed replicas and a keyed gateway run;
a tunnel of the console's is open. The co-tenant (`cotenant_probe`, stdlib
only, under the system's `python3 -I`) then tries what issue 34 saw work:
every Unix socket named llmgw, vllm-router's admin routes and OpenAI's on
every port the product listens on (plain and TLS), every file of the nodes'
homes (made traversable, as many clusters make homes), every process's
command line and environment; then it binds a killed engine's port while
the operator's keyed requests go through the gateway.

Needs root (to add the account); skips, saying so, elsewhere.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_demo_harness import Demo

from llmgw_core.gateway.run import find_gateway, front_call
from llmgw_core.serve.http import EngineReach
from llmgw_core.serve.replicas import find_replica

SYSTEM_PYTHON = Path("/usr/bin/python3")
RUNUSER = shutil.which("runuser") or "runuser"
USER = "llmgw-cotenant"
MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"
KEY_ENV = "LLMGW_COTENANT_KEY"
PROMPT = "the operator's secret prompt"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("runuser") is None,
        reason="a second Unix user needs root, useradd and runuser (run the suite as root, as CI does)",
    ),
    pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="the co-tenant needs /usr/bin/python3"),
]


@pytest.fixture(scope="module")
def cotenant() -> Iterator[str]:
    made = subprocess.run(["id", "-u", USER], capture_output=True).returncode != 0
    if made:
        subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", USER], check=True)
    try:
        yield USER
    finally:
        if made:
            subprocess.run(["userdel", USER], check=False)


@pytest.fixture(scope="module")
def world() -> Iterator[Path]:
    """A folder every user may traverse (pytest's own is the operator's alone)."""
    root = Path(tempfile.mkdtemp(prefix="llmgw-cotenant-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def demo(world: Path) -> Iterator[Demo]:
    running = Demo(world)
    try:
        yield running
    finally:
        running.close()


def _as_cotenant(world: Path, given: dict[str, Any]) -> subprocess.Popen[str]:
    probe = world / "cotenant_probe.py"
    if not probe.exists():
        shutil.copy(Path(__file__).with_name("cotenant_probe.py"), probe)
        probe.chmod(0o644)
    process = subprocess.Popen(
        [RUNUSER, "-u", USER, "--", str(SYSTEM_PYTHON), "-I", str(probe)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},  # not the operator's (and its key)
    )
    assert process.stdin is not None
    process.stdin.write(json.dumps(given))  # secrets on stdin: argv is every user's to read
    process.stdin.close()
    return process


def _result(process: subprocess.Popen[str], timeout_s: float = 120) -> dict[str, Any]:
    assert process.stdout is not None and process.stderr is not None
    out = process.stdout.read()
    process.wait(timeout_s)
    assert process.returncode == 0, process.stderr.read()[-3000:]
    return json.loads(out.splitlines()[-1])


def _shards(demo: Demo, node: str) -> list[dict[str, Any]]:
    answer = demo.loop.run(demo.fleet.request(node, "shard.list"))
    return [s for s in answer["shards"] if s["phase"] == "running"]


def test_a_second_user_of_the_node_reaches_nothing_the_operator_started(
    demo: Demo, world: Path, cotenant: str, monkeypatch: pytest.MonkeyPatch
):
    key = f"sk-cotenant-{secrets.token_hex(12)}"
    monkeypatch.setenv(KEY_ENV, key)
    for name in ("left", "right"):
        outcome = demo.step(
            "serve", model=MODEL, context=8192, gpu_class="l40s-48g", name=name, api_key_env=KEY_ENV
        )
        assert outcome.ok, outcome.error
    node_of = {}
    engines = {}
    for name in ("left", "right"):
        view = demo.loop.run(find_replica(demo.fleet, name))
        node, port, _ = view.ready_engine()
        node_of[name], engines[name] = node, (view.http_host, port)
    gateway_node = "cpu-01"
    free = demo.loop.run(
        demo.fleet.request(gateway_node, "port.free", {"start": 31000, "count": 1})
    )
    front_port = int(free["ports"][0])
    outcome = demo.step(
        "gateway", name="door", node=gateway_node, port=front_port, api_key_env=KEY_ENV
    )
    assert outcome.ok, outcome.error
    # Homes others may enter, as on many clusters: only the product's own modes keep them out.
    for home in (world / "demo" / "nodes").glob("*/home"):
        for folder in (home, home.parent, home.parent.parent):
            folder.chmod(0o755)
    (world / "demo").chmod(0o755)

    reach = EngineReach(demo.fleet)
    try:
        # A tunnel of the console's, open while the co-tenant looks.
        host, port = engines["left"]
        tunnel = demo.loop.run(reach.tunnel(node_of["left"], port, host))
        pids = [s["main_pid"] for n in set(node_of.values()) | {gateway_node}
                for s in _shards(demo, n)]  # fmt: skip
        seen = _result(
            _as_cotenant(
                world,
                {
                    "mode": "survey",
                    "root": str(world),
                    "ports": [front_port] + [p for _, p in engines.values()],
                    "pids": pids,
                    "secrets": {
                        "client key": key,
                        "a private key": "PRIVATE KEY-----",
                    },
                },
            )
        )
        assert seen["uid"] != 0

        # Every Unix socket of the product refuses the stranger: the front's control socket,
        # the console's tunnel, every agent's and supervisor's.
        sockets = seen["sockets"]
        assert any(p.endswith("/front.sock") for p in sockets), sockets
        assert any(tunnel.path == p for p in sockets), (tunnel.path, sockets)
        assert {p: o for p, o in sockets.items() if o == "connected"} == {}

        # No route of any port answers the stranger: no admin API, no model without the key.
        answered = {probe: said for probe, (status, said) in seen["ports"].items()
                    if 200 <= status < 300}  # fmt: skip
        assert answered == {}
        statuses = {status for status, _ in seen["ports"].values()}
        assert 401 in statuses  # the keyed routes said why, over the protocol each port speaks

        # Files: the walk went through the homes, read what it could, and found no secret.
        files = seen["files"]
        assert files["readable"] > 0 and files["leaked"] == [], files["leaked"]
        # Each node's agent state (shards, logs, supervisors' sockets) is the operator's alone.
        for node in set(node_of.values()) | {gateway_node}:
            state = str(world / "demo" / "nodes" / node / "home" / "state")
            assert state in files["denied"], (state, files["denied"][:20])

        # Processes: no command line carries a secret, no engine's environment is readable.
        processes = seen["processes"]
        assert processes["leaked"] == []
        assert set(processes["environ"].values()) <= {"PermissionError"}, processes["environ"]

        # The front's workers are still the operator's two.
        view = demo.loop.run(find_gateway(demo.fleet, "door"))
        status, text = demo.loop.run(front_call(demo.fleet, view, "GET", "/workers"))
        assert status == 200, text
        urls = sorted(w["url"] for w in json.loads(text)["workers"])
        assert len(urls) == 2 and all("127.0.0.1:9" not in u for u in urls), urls

        # A squat: the left engine is killed and the stranger takes its port at once.
        (left_shard,) = [s for s in _shards(demo, node_of["left"]) if s["replica"] == "left"]
        os.kill(left_shard["main_pid"], signal.SIGKILL)
        squatter = _as_cotenant(
            world,
            {
                "mode": "squat",
                "host": host,
                "port": port,
                "wait_s": 10,
                "seconds": 6,
                "secrets": {"client key": key, "prompt": PROMPT},
            },
        )
        assert squatter.stdout is not None
        assert squatter.stdout.readline().strip() == "bound"
        statuses = []
        body = {"model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 8,
                "messages": [{"role": "user", "content": PROMPT}]}  # fmt: skip
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {key}"}) as client:
            began = time.monotonic()
            while time.monotonic() - began < 4:
                answer = client.post(
                    f"http://127.0.0.1:{front_port}/v1/chat/completions", json=body
                )
                statuses.append(answer.status_code)
        squatted = _result(squatter)
        assert squatted["bound"] is True
        assert set(statuses) == {200}, statuses  # every one answered by the right engine
        received = squatted["received"]
        assert received, "the front's health check never came to the squatted port"
        # Each connection stopped at the TLS hello: no request line, no key, no prompt.
        assert all(r["first"] == "16" and not r["http"] for r in received), received
        assert all(not r["authorization"] and r["leaked"] == [] for r in received), received
        print(
            f"\nco-tenant uid {seen['uid']}: {len(sockets)} Unix sockets refused, "
            f"{len(seen['ports'])} port probes without a 2xx, {files['readable']} files read "
            f"({len(files['denied'])} refused) with no secret, {len(pids)} shards' environments "
            f"closed; squatting a killed engine's port it got {len(received)} TLS hellos and "
            f"nothing else while {len(statuses)} keyed requests all succeeded"
        )
    finally:
        demo.loop.run(reach.close())
        for name in ("door",):
            demo.step("stop", gateway=name)
        for name in ("left", "right"):
            demo.step("stop", replica=name)
