"""A Slurm service rolled with `apply` while `bench` sends through its gateway from another
console: the new replica is a new job, the old one is drained, stopped and its job
cancelled, and not one request fails."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from kept_demo import chat_service, run_json, start_json
from slurm_cluster import SlurmCluster
from slurm_login import login_node, write_captures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _apply(inventory: str, env: dict[str, str], service: dict) -> dict:
    script = yaml.safe_dump({"steps": [{"apply": {"service": service}}]})
    code, steps, said = run_json(inventory, script, env=env)
    assert code == 0, (steps, said[-3000:])
    return steps[0]["result"]


def _jobs(slurm: SlurmCluster) -> list[str]:
    return [line.split()[0] for line in slurm.run("squeue", "-h", "-o", "%i %j").splitlines()]


def test_a_slurm_service_rolls_under_a_bench_with_no_request_failed(
    tmp_path: Path, slurm: SlurmCluster
):
    captures = write_captures(tmp_path / "captures", {"h100-1": "hgx-h100", "h100-2": "hgx-h100"})
    cluster = (
        f"  - name: big\n    slurm: {{login: slurm-login, partition: gpu, replay: {captures}}}\n"
    )
    service = chat_service(replicas=1, gpus=1, cluster="big", drain_s=20)
    with login_node(tmp_path, {"SLURM_CONF": str(slurm.conf)}, cluster) as (inventory, env):
        first = _apply(inventory, env, service)
        assert [r["phase"] for r in first["replicas"]] == ["ready"]
        (old_job,) = _jobs(slurm)
        bench_script = tmp_path / "bench.yaml"
        bench_script.write_text(
            yaml.safe_dump(
                {
                    "steps": [
                        {
                            "bench": {
                                "gateway": "front",
                                "duration_s": 25,
                                "concurrency": 4,
                                "max_tokens": 16,
                            }
                        }
                    ]
                }
            )
        )
        bench = start_json(inventory, bench_script, env)
        try:
            time.sleep(4)  # the benchmark is sending
            rolled = _apply(inventory, env, {**service, "context": 16384})
            out, err = bench.communicate(timeout=150)
        finally:
            if bench.poll() is None:
                os.killpg(bench.pid, 9)
        assert bench.returncode == 0, err[-3000:]
        benched = json.loads(out.splitlines()[-1])["result"]
        assert [(a["action"], a["replica"]) for a in rolled["actions"]] == [("replace", "chat-1")]
        print(
            f"roll under load on Slurm: {benched['requests']} requests, {benched['failed']} failed"
        )
        assert benched["failed"] == 0, benched.get("errors")
        assert benched["requests"] > 20
        (new_job,) = _jobs(slurm)  # the old replica's job was cancelled with it
        assert new_job != old_job
        code, steps, said = run_json(
            inventory, "steps: [{stop: {service: chat}}, {stop: {gateway: front}}]", env=env
        )
    assert code == 0, (said, steps)
    assert slurm.queue() == []
