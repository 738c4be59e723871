"""The demo fleet end to end: `llmgw-tui --demo --run -` lists every node, and leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmgw_core.fleet.sim.demo import demo_nodes, processes_rooted_in

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from llmgw_tui.cli import main; sys.exit(main())"]


def _env(tmp_path: Path) -> dict[str, str]:
    """The demo puts everything under TMPDIR: here, so the test can look for leftovers."""
    return {**os.environ, "TMPDIR": str(tmp_path)}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_the_demo_lists_every_node_ready_and_no_process_of_it_survives(tmp_path: Path):
    script = "steps:\n  - nodes: {all_ready: true}\n"
    done = subprocess.run(
        [*CLI, "--demo", "--run", "-", "--json"],
        input=script,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [json.loads(text) for text in done.stdout.splitlines() if text.strip()]
    assert line["step"] == "nodes" and line["ok"] is True
    rows = {row["name"]: row for row in line["result"]["nodes"]}
    assert list(rows) == [node.name for node in demo_nodes()]
    assert len(rows) == 23
    assert {row["state"] for row in rows.values()} == {"ready"}
    assert line["result"]["counts"] == {"ready": 23}
    assert rows["h100-a-01"]["gpus"] == 8 and rows["h100-a-01"]["classes"] == ["h100-80g"]
    assert rows["h100-a-02"]["fabrics"] == ["ib-a"]
    trays = [row for name, row in rows.items() if name.startswith("gb200-r1-t")]
    assert len(trays) == 18 and all(row["gpus"] == 4 for row in trays)
    domains = {json.dumps(row["nvlink_domain"]) for row in trays if row["nvlink_domain"]}
    assert len(domains) == 1  # one rack, one NVLink domain
    assert rows["gb200-r1-t13"]["nvlink_domain"] is None  # the tray that did not join
    assert any("mig" in gpu_class for gpu_class in rows["a100-mig-01"]["classes"])
    assert rows["l40s-01"]["classes"] == ["l40s-48g"]
    assert rows["cpu-01"]["gpus"] == 0
    assert {row["agent_version"] for row in rows.values()} == {"0.1.0"}
    assert processes_rooted_in(tmp_path) == []
    assert list(tmp_path.glob("llmgw-demo-*")) == []


DRIVER = """
import asyncio, json, signal, sys
from llmgw_core.fleet.session import open_fleet

def tell_where_every_task_waits():
    for task in asyncio.all_tasks():
        task.print_stack(limit=8, file=sys.stderr)
    sys.stderr.flush()

# As a console started from a terminal: a test run started in the background by a shell
# without job control inherits SIGINT ignored, and so would this console.
signal.signal(signal.SIGINT, signal.default_int_handler)

async def main():
    # SIGUSR1: a console that does not end is asked where it waits (the test prints it).
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, tell_where_every_task_waits)
    fleet, close = await open_fleet(inventory=None, demo=True)
    try:
        spec = {"replica": "r1", "rank": 0, "commands": [{"argv": ["sleep", "300"]}]}
        await fleet.request("cpu-01", "shard.start", spec, timeout_s=30)
        # shard.start answers once the supervisor runs; the command's pid comes a moment
        # later (on a loaded machine, later than the first listing).
        pids = []
        while not pids:
            listing = await fleet.request("cpu-01", "shard.list", timeout_s=30)
            pids = [c["pid"] for s in listing["shards"] for c in s["commands"] if c["pid"]]
            await asyncio.sleep(0 if pids else 0.05)
        pids.append(fleet.client("cpu-01").hello["pid"])
        print(json.dumps({"pids": pids}), flush=True)
        await asyncio.sleep(120)
    finally:
        await close()

asyncio.run(main())
"""


def _demo_console(tmp_path: Path) -> subprocess.Popen[str]:
    """A console process running the demo with one shard; its first line lists the pids."""
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
        cwd=REPO,
    )


def _pids_of(console: subprocess.Popen[str]) -> list[int]:
    """The shard and agent pids the console printed once the demo ran (its stderr if it died)."""
    assert console.stdout is not None and console.stderr is not None
    first = console.stdout.readline()
    assert first, console.stderr.read()
    return json.loads(first)["pids"]


def test_ctrl_c_ends_the_demo_with_its_agents_and_their_shards(tmp_path: Path):
    console = _demo_console(tmp_path)
    try:
        pids = _pids_of(console)
        assert all(_alive(pid) for pid in pids)
        console.send_signal(signal.SIGINT)
        try:
            console.wait(60)
        except subprocess.TimeoutExpired:
            console.send_signal(signal.SIGUSR1)
            time.sleep(2)
            console.kill()
            _, said = console.communicate()
            pytest.fail(
                f"the console did not end within 60 s of Ctrl-C; its tasks:\n{said[-6000:]}"
            )
    finally:
        if console.poll() is None:
            console.kill()
            console.wait()
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)
    assert processes_rooted_in(tmp_path) == []
    assert list(tmp_path.glob("llmgw-demo-*")) == []


def test_a_killed_console_leaves_shards_that_the_next_demo_sweeps(tmp_path: Path):
    from llmgw_core.fleet.sim.demo import sweep_abandoned

    console = _demo_console(tmp_path)
    try:
        shard_pid = _pids_of(console)[0]
    finally:
        console.kill()  # no chance to clean up
        console.wait()
    assert _alive(shard_pid)  # detached from the console, by design
    (abandoned,) = tmp_path.glob("llmgw-demo-*")
    assert sweep_abandoned(tmp_path) == [abandoned]
    assert not _alive(shard_pid)
    assert processes_rooted_in(tmp_path) == []
    assert not abandoned.exists()
