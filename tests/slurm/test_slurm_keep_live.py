"""`keep` on a Slurm service: a replica's job cancelled from outside is a failed replica with
the scheduler's words, and `keep` submits a new job for it, saying why in its event.

The console runs `keep` in a process of its own while the test cancels the replica's job
with `scancel`, as another operator or the scheduler itself (a time limit, a preemption)
would end it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from kept_demo import run_json, start_json
from slurm_cluster import SlurmCluster
from slurm_login import login_node, write_captures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SERVICE = (
    "{name: chat, model: 'catalog:meta-llama/Llama-3.1-8B-Instruct', context: 8192,"
    " cluster: big, gpu_class: h100-80g, gpus: 1}"
)


def _running_jobs(slurm: SlurmCluster) -> list[str]:
    out = slurm.run("squeue", "-h", "-o", "%i %T %j")
    return [line.split()[0] for line in out.splitlines() if " RUNNING llmgw-" in line]


def test_keep_resubmits_a_job_cancelled_from_outside_with_the_schedulers_reason(
    tmp_path: Path, slurm: SlurmCluster
):
    captures = write_captures(tmp_path / "captures", {"h100-1": "hgx-h100", "h100-2": "hgx-h100"})
    cluster = (
        f"  - name: big\n    slurm: {{login: slurm-login, partition: gpu, replay: {captures}}}\n"
    )
    with login_node(tmp_path, {"SLURM_CONF": str(slurm.conf)}, cluster) as (inventory, env):
        script = tmp_path / "keep.yaml"
        script.write_text(f"steps:\n  - keep: {{service: {SERVICE}, duration_s: 45}}\n")
        keeping = start_json(inventory, script, env)
        try:
            slurm.wait_for(
                "the service's first job running",
                lambda: bool(_running_jobs(slurm)) or keeping.poll() is not None,
                60,
            )
            assert keeping.poll() is None, keeping.communicate()
            (first,) = _running_jobs(slurm)
            time.sleep(8)  # ready behind its job, as keep sees it
            # A second console beside the keeper joins the same job's node, an agent of its own.
            code, lines, said = run_json(inventory, "steps: [{replicas: {}}]", env=env)
            assert code == 0, (said, lines)
            (listed,) = lines[0]["result"]["replicas"]
            assert (listed["name"], listed["phase"]) == ("chat-1", "ready")
            assert listed["slurm"]["job_id"] == first
            slurm.run("scancel", first)
            slurm.wait_for(
                "a new job for the replica",
                lambda: [j for j in _running_jobs(slurm) if j != first] != [],
                60,
            )
            out, err = keeping.communicate(timeout=120)
        finally:
            if keeping.poll() is None:
                os.killpg(keeping.pid, 9)
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert keeping.returncode == 0, (err, lines)
        events = lines[0]["result"]["events"]
        heals = [e for e in events if e["action"] == "heal"]
        assert heals, events
        assert f"job {first} on big ended: CANCELLED" in heals[0]["why"], heals
        (second,) = _running_jobs(slurm)
        assert second != first
        code, lines, said = run_json(inventory, "steps: [{stop: {service: chat}}]", env=env)
    assert code == 0, (said, lines)
    assert slurm.queue() == []
