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


def test_an_engine_named_to_demo_up_must_be_a_program_here(tmp_path: Path):
    from llmgw_core.errors import BadInput
    from llmgw_core.fleet.sim.demo import demo_engines

    python = tmp_path / "venv" / "bin" / "python3"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    assert demo_engines([f"llama.cpp={python}", f"sglang={python}"]) == {
        "llama.cpp": {"python": str(python)},  # llama-cpp-python's server
        "sglang": {"python": str(python)},
    }
    for wrong in ("vllm", "tgi=/bin/sh", "vllm=bin/vllm", f"vllm={tmp_path}"):
        try:
            demo_engines([wrong])
        except BadInput as exc:
            assert "--engine" in exc.sentence()
        else:
            raise AssertionError(f"{wrong!r} was taken")
    refused = cli("demo", "up", "--dir", str(tmp_path / "d"), "--engine", "vllm=nowhere")
    assert refused.returncode == 2 and "is not a program on this machine" in refused.stderr
    assert not (tmp_path / "d").exists()
    wrong_action = cli("demo", "status", "--dir", str(tmp_path / "d"), "--engine", f"vllm={python}")
    assert wrong_action.returncode == 2 and "--engine goes with up" in wrong_action.stderr
