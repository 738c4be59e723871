"""The readers on what a real Slurm prints: the private cluster's nodes and jobs, read through
both of its formats (Debian's 22.05: `scontrol -o -d` and `sinfo`/`squeue --json`), which
must agree; and its output with a hostile value spliced in, read or refused in one sentence.

One scene is set for the module: a job holding every H100 of both H100 nodes, one behind it
waiting for `Resources`, one behind that waiting for `Priority`, one pinned to a drained
node (`ReqNodeNotAvail`), and two A100 cards held on the A100 node.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slurm_cluster import SlurmCluster, node_address

from llmgw_core.slurm.gres import GresCount
from llmgw_core.slurm.jobs import SlurmJob, read_jobs_json, read_jobs_oneline, read_submitted
from llmgw_core.slurm.nodes import SlurmNode, read_nodes_json, read_nodes_oneline
from llmgw_core.slurm.text import SlurmOutputUnreadable
from llmgw_core.slurm.version import read_version

pytestmark = pytest.mark.slow  # real daemons: a few seconds a test


@pytest.fixture(scope="module")
def scene(
    slurm_session: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """What the cluster printed with the scene set, keyed by command; ids under `job:NAME`."""
    slurm = slurm_session
    folder: Path = tmp_path_factory.mktemp("scene")
    script = folder / "job.sh"
    script.write_text("#!/bin/sh\nsleep 120\n")

    def submit(name: str, *options: str) -> str:
        printed = slurm.run("sbatch", "--parsable", "-J", name, "-D", str(folder), "-o", "/dev/null", *options, str(script))  # fmt: skip
        return read_submitted(printed, "sbatch --parsable")

    slurm.run("scontrol", "update", "nodename=cpu-1", "state=drain", "reason=fan 2 failed State=x")
    try:
        printed = {
            "job:all-h100": submit(
                "all-h100", "-N", "2", "--ntasks-per-node=1", "--gres=gpu:h100:8"
            )
        }
        slurm.wait_for(
            "the first job to run", lambda: "RUNNING" in slurm.run("squeue", "-h", "-o", "%T")
        )
        printed["job:a100-two"] = submit("a100-two", "--gres=gpu:a100:2")
        printed["job:behind"] = submit("behind", "--gres=gpu:h100:1")
        printed["job:behind-that"] = submit("behind-that", "--gres=gpu:h100:1")
        printed["job:on-drained"] = submit("on-drained", "-p", "cpu", "-w", "cpu-1")
        slurm.wait_for(
            "every job to be placed or given a reason",
            lambda: "2 RUNNING" in (states := slurm.run("squeue", "-h", "-o", "%T %r")).replace("RUNNING None", "1 RUNNING").replace("1 RUNNING\n1 RUNNING", "2 RUNNING")
            and "Resources" in states and "Priority" in states and "ReqNodeNotAvail" in states,
        )  # fmt: skip
        printed["scontrol -o -d show node"] = slurm.run("scontrol", "-o", "-d", "show", "node")
        printed["sinfo --json"] = slurm.run("sinfo", "--json")
        printed["scontrol -o -d show job"] = slurm.run("scontrol", "-o", "-d", "show", "job")
        printed["squeue --json"] = slurm.run("squeue", "--json")
        printed["scontrol --version"] = slurm.run("scontrol", "--version")
        yield printed
    finally:
        slurm.run("scontrol", "update", "nodename=cpu-1", "state=resume", check=False)
        slurm.cancel_all()


def nodes_by_name(nodes: list[SlurmNode]) -> dict[str, SlurmNode]:
    return {node.name: node for node in nodes}


SCENE_JOBS = ("all-h100", "a100-two", "behind", "behind-that", "on-drained")


def jobs_by_name(jobs: list[SlurmJob]) -> dict[str, SlurmJob]:
    """The scene's jobs (an earlier test's finished ones may still be listed)."""
    return {job.name: job for job in jobs if job.name in SCENE_JOBS}


def test_the_node_list_says_which_cards_are_taken_and_which_node_is_drained(scene):
    nodes = nodes_by_name(read_nodes_oneline(scene["scontrol -o -d show node"]))
    assert sorted(nodes) == ["a100-1", "cpu-1", "h100-1", "h100-2"]
    h100 = nodes["h100-1"]
    assert h100.gpus == (GresCount(name="gpu", type="h100", count=8),)
    assert (h100.gpus_used, h100.gpus_free) == (8, 0)
    assert h100.state == "MIXED" and h100.available  # its CPUs are not all taken
    assert h100.features == ("h100", "nvlink") and h100.partitions == ("gpu",)
    assert (h100.cpus, h100.memory_mib, h100.hostname, h100.address) == (
        8,
        64000,
        "localhost",
        node_address(),
    )
    assert (nodes["a100-1"].gpu_count, nodes["a100-1"].gpus_used) == (4, 2)
    drained = nodes["cpu-1"]
    assert drained.states == ("IDLE", "DRAIN") and not drained.available
    assert drained.reason == "fan 2 failed State=x" and drained.gpus == ()


def test_sinfo_json_and_the_one_line_format_read_the_same_nodes(scene):
    one_line = nodes_by_name(read_nodes_oneline(scene["scontrol -o -d show node"]))
    from_json = nodes_by_name(read_nodes_json(scene["sinfo --json"]))
    assert one_line == from_json


def test_each_job_reads_with_its_state_reason_nodes_and_cards(scene):
    jobs = jobs_by_name(read_jobs_oneline(scene["scontrol -o -d show job"]))
    both = jobs["all-h100"]
    assert both.running and both.nodes == ("h100-1", "h100-2") and both.node_count == 2
    assert both.card_indices == {"h100-1": tuple(range(8)), "h100-2": tuple(range(8))}
    assert both.gpus_allocated == 16 and both.job_id == scene["job:all-h100"]
    assert jobs["a100-two"].card_indices == {"a100-1": (0, 1)}
    assert (jobs["behind"].state, jobs["behind"].reason) == ("PENDING", "Resources")
    assert (jobs["behind-that"].state, jobs["behind-that"].reason) == ("PENDING", "Priority")
    assert jobs["behind"].gpus_per_node == GresCount(name="gpu", type="h100", count=1)
    assert jobs["behind"].nodes == () and jobs["behind"].gpus_allocated == 0
    pinned = jobs["on-drained"]
    assert pinned.pending and pinned.reason == "ReqNodeNotAvail"
    assert pinned.reason_detail == "ReqNodeNotAvail, UnavailableNodes:cpu-1"
    assert pinned.partition == "cpu" and pinned.gpus_per_node is None


def test_squeue_json_and_the_one_line_format_read_the_same_jobs(scene):
    one_line = jobs_by_name(read_jobs_oneline(scene["scontrol -o -d show job"]))
    from_json = jobs_by_name(read_jobs_json(scene["squeue --json"]))
    assert one_line == from_json


def test_the_cluster_s_version_picks_sinfo_json_for_its_nodes(scene):
    version = read_version(scene["scontrol --version"])
    assert version.release == (22, 5) and version.node_listing == "sinfo-json"


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    which=st.integers(0, 10**6),
    value=st.sampled_from(
        ["", "x", "-1", "(null)", "a=b", "[", "gpu:h100:x(IDX:9-1)", "9" * 40, "IDLE+"]
    ),
)
def test_real_output_with_a_hostile_value_is_read_or_refused_in_one_sentence(scene, which, value):
    line_text = scene["scontrol -o -d show node"] + scene["scontrol -o -d show job"]
    pairs = [index for index, char in enumerate(line_text) if char == "="]
    at = pairs[which % len(pairs)] + 1
    end = line_text.find(" ", at)
    spliced = line_text[:at] + value + line_text[end if end != -1 else len(line_text) :]
    for reader in (read_nodes_oneline, read_jobs_oneline):
        try:
            reader(spliced)
        except SlurmOutputUnreadable as refusal:
            assert "\n" not in refusal.sentence()
    document = json.loads(scene["squeue --json"])
    job = document["jobs"][which % len(document["jobs"])]
    key = sorted(job)[which % len(job)]
    job[key] = value
    try:
        read_jobs_json(json.dumps(document))
    except SlurmOutputUnreadable as refusal:
        assert "\n" not in refusal.sentence()
