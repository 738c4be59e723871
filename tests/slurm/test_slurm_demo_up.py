"""`llmgw-tui demo up --slurm`: the demo fleet with a real Slurm cluster beside it, as an
operator tries it. Its two entries (`hgx`, `nvl`) share one login node, as two partitions of
one site do: a job joins under the entry it was submitted for, and a gateway on the shared
login node is acted on once."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from kept_demo import cli, processes_naming, run_json
from ports import free_port
from slurm_cluster import slurm_missing

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LLAMA_70B = "catalog:meta-llama/Llama-3.3-70B-Instruct"


@pytest.mark.skipif(bool(slurm_missing()), reason=slurm_missing() or "-")
def test_demo_up_slurm_serves_on_the_rack_and_a_later_run_finds_and_stops_the_job(
    tmp_path: Path,
):
    folder = tmp_path / "demo"
    began = time.monotonic()
    up = cli("demo", "up", "--slurm", "--dir", str(folder))
    assert up.returncode == 0, up.stdout + up.stderr
    print(f"demo up --slurm: {time.monotonic() - began:.1f} s")
    inventory = up.stdout.strip().splitlines()[-1]
    conf = folder / "slurm" / "daemons" / "slurm.conf"
    try:
        again = cli("demo", "up", "--dir", str(folder))  # up already, and not as asked
        assert again.returncode == 0
        assert "with its Slurm cluster" in again.stderr
        port = free_port()
        script = (
            "steps:\n"
            "  - clusters: {}\n"
            f"  - serve: {{model: '{LLAMA_70B}', context: 8192, name: rack, cluster: nvl}}\n"
            f"  - gateway: {{name: sgw, port: {port}, node: nvl-login}}\n"
            "  - ask: {gateway: sgw, prompt: 'hello from the rack', max_tokens: 8}\n"
            "  - stop: {gateway: sgw}\n"
            # The name runs in a job: another job of that name is refused before it is
            # submitted (the script ends there, with exit code 2).
            f"  - serve: {{model: '{LLAMA_70B}', name: rack, cluster: hgx}}\n"
        )
        code, lines, said = run_json(inventory, script, timeout=200)
        assert code == 2, (said[-3000:], lines)
        listed, served, gateway, asked, stopped = (line["result"] for line in lines[:5])
        nodes = {c["cluster"]: [n["name"] for n in c["nodes"]] for c in listed["clusters"]}
        assert nodes == {"hgx": ["hgx-1", "hgx-2"], "nvl": [f"nvl-t{t}" for t in range(1, 5)]}
        assert served["phase"] == "ready"
        assert served["way"]["gpu_class"] == "gb200-186g"
        assert gateway["node"] == "nvl-login"
        assert "simulated" in asked["text"]
        assert stopped["stopped"] is True
        assert lines[5]["error"].startswith("a replica named 'rack' already runs (ready)")
        # A later run, on the clusters alone (the SSH nodes play no part here): the job is
        # joined under `nvl`, the entry it was submitted for, and stopping the replica
        # cancels it.
        document = yaml.safe_load(Path(inventory).read_text())
        clusters_only = tmp_path / "clusters.yaml"
        clusters_only.write_text(yaml.safe_dump({**document, "nodes": []}))
        code, lines, said = run_json(
            str(clusters_only), "steps: [{replicas: {}}, {stop: {replica: rack}}]", timeout=120
        )
        assert code == 0, (said[-3000:], lines)
        (replica,) = lines[0]["result"]["replicas"]
        assert replica["slurm"]["cluster"] == "nvl"
        assert replica["phase"] == "ready"
        assert len(lines[1]["result"]["slurm_jobs_cancelled"]) == 1
        queue = subprocess.run(
            ["squeue", "-h"], env={**os.environ, "SLURM_CONF": str(conf)}, capture_output=True
        )
        assert queue.stdout == b""
    finally:
        down = cli("demo", "down", "--dir", str(folder))
    assert down.returncode == 0, down.stdout + down.stderr
    assert processes_naming(folder) == []  # the daemons, the jobs' steps and agents: all gone


def test_demo_up_slurm_without_slurm_installed_is_one_sentence(tmp_path: Path):
    done = cli("demo", "up", "--slurm", "--dir", str(tmp_path), env={"PATH": str(tmp_path)})
    assert done.returncode == 2
    (said,) = done.stderr.strip().splitlines()
    assert said.startswith("llmgw-tui: demo up --slurm needs a local Slurm: Slurm is not installed")
    assert not (tmp_path / "up.json").exists()
