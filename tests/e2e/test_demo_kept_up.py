"""The demo fleet kept up between runs: `llmgw-tui demo up | status | down`.

As a person runs it: `up` in a subprocess prints an inventory's path, `up`
again prints the same path, two scripts run against that inventory from two
processes at once, `down` leaves no process that names the demo's folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "llmgw_tui.cli"]
NODES = "steps:\n  - nodes: {}\n"


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def _processes_naming(folder: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            seen = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if str(folder).encode() in seen:
            found.append(int(proc.name))
    return found


def test_the_demo_fleet_kept_up_serves_two_processes_then_leaves_nothing(tmp_path: Path):
    folder = tmp_path / "kept"
    try:
        started = _cli("demo", "up", "--dir", str(folder))
        assert started.returncode == 0, started.stderr
        inventory = started.stdout.strip().splitlines()[-1]
        assert inventory == str(folder / "inventory.yaml")
        again = _cli("demo", "up", "--dir", str(folder))
        assert again.stdout.strip().splitlines() == [inventory]
        assert _cli("demo", "status", "--dir", str(folder)).returncode == 0
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
        stopped = _cli("demo", "down", "--dir", str(folder))
    assert stopped.returncode == 0 and stopped.stdout.strip().endswith("is down")
    assert _processes_naming(folder) == []
    gone = _cli("demo", "status", "--dir", str(folder))
    assert gone.returncode == 3 and gone.stdout.strip().endswith("is down")
    assert _cli("demo", "down", "--dir", str(folder)).stdout.strip().endswith("is not up")
