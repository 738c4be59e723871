"""The demo fleet kept up between runs: `llmgw-tui demo up | status | down`.

As a person runs it: `up` in a subprocess prints an inventory's path, `up`
again prints the same path, two scripts run against that inventory from two
processes at once, `down` leaves no process that names the demo's folder.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from kept_demo import CLI, cli, processes_naming

NODES = "steps:\n  - nodes: {}\n"


def test_the_demo_fleet_kept_up_serves_two_processes_then_leaves_nothing(tmp_path: Path):
    folder = tmp_path / "kept"
    try:
        started = cli("demo", "up", "--dir", str(folder))
        assert started.returncode == 0, started.stderr
        inventory = started.stdout.strip().splitlines()[-1]
        assert inventory == str(folder / "inventory.yaml")
        again = cli("demo", "up", "--dir", str(folder))
        assert again.stdout.strip().splitlines() == [inventory]
        assert cli("demo", "status", "--dir", str(folder)).returncode == 0
        script = tmp_path / "nodes.yaml"
        script.write_text(NODES)
        runs = [
            subprocess.Popen(
                [*CLI, "--inventory", inventory, "--run", str(script), "--json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        for run in runs:
            out, err = run.communicate(timeout=180)
            assert run.returncode == 0, err[-2000:]
            assert '"ok": true' in out and "cpu-01" in out
    finally:
        stopped = cli("demo", "down", "--dir", str(folder))
    assert stopped.returncode == 0 and stopped.stdout.strip().endswith("is down")
    assert processes_naming(folder) == []
    gone = cli("demo", "status", "--dir", str(folder))
    assert gone.returncode == 3 and gone.stdout.strip().endswith("is down")
    assert cli("demo", "down", "--dir", str(folder)).stdout.strip().endswith("is not up")
