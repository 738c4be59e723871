"""The job readers across Slurm's versions: state, the scheduler's reason, the nodes and the
cards a job holds; and their refusals. The live cluster's own jobs are read in tests/slurm/."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw_core.slurm.gres import GresCount
from llmgw_core.slurm.jobs import read_jobs_json, read_jobs_oneline, read_submitted
from llmgw_core.slurm.text import SlurmOutputUnreadable

# scontrol -o -d show job of a two-node job on 23.11: per-node detail groups repeat
# `Nodes= CPU_IDs= Mem= GRES=`, the request is written `gres/gpu:h100=8`.
RUNNING_2311 = (
    "JobId=4411 JobName=llmgw-r1 UserId=ops(1000) GroupId=ops(1000) MCS_label=N/A "
    "Priority=1 Nice=0 Account=ml QOS=normal JobState=RUNNING Reason=None Dependency=(null) "
    "Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:10:00 TimeLimit=1-00:00:00 "
    "Partition=gpu AllocNode:Sid=login1:123 ReqNodeList=(null) ExcNodeList=(null) "
    "NodeList=h100-[11-12] BatchHost=h100-11 NumNodes=2 NumCPUs=32 NumTasks=2 CPUs/Task=1 "
    "ReqB:S:C:T=0:0:*:* ReqTRES=cpu=2,mem=16G,node=2,billing=2,gres/gpu=16 "
    "AllocTRES=cpu=32,mem=16G,node=2,billing=32,gres/gpu=16 Socks/Node=* "
    "JOB_GRES=gpu:h100:16 Nodes=h100-11 CPU_IDs=0-15 Mem=8192 GRES=gpu:h100:8(IDX:0-7) "
    "Nodes=h100-12 CPU_IDs=0-15 Mem=8192 GRES=gpu:h100:8(IDX:0-7) MinCPUsNode=1 "
    "Features=nvlink DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) "
    "Network=(null) Command=/home/ops/.cache/llmgw/r1.sh WorkDir=/home/ops "
    "TresPerNode=gres/gpu:h100=8"
)
PENDING_2011 = (
    "JobId=98 JobName=big UserId=ops(1000) GroupId=ops(1000) Priority=1 Account=ml QOS=small "
    "JobState=PENDING Reason=QOSMaxGRESPerUser Dependency=(null) NodeList=(null) NumNodes=4-4 "
    "NumCPUs=4 TRES=cpu=4,node=4,billing=4 Partition=gpu TresPerNode=gpu:a100:8"
)


def test_a_running_job_over_two_nodes_holds_eight_cards_on_each():
    (job,) = read_jobs_oneline(RUNNING_2311)
    assert job.job_id == "4411" and job.running and not job.pending and not job.finished
    assert job.nodes == ("h100-11", "h100-12") and job.node_count == 2
    assert job.card_indices == {"h100-11": tuple(range(8)), "h100-12": tuple(range(8))}
    assert job.gpus_allocated == 16
    assert job.gpus_per_node == GresCount(name="gpu", type="h100", count=8)
    assert (job.account, job.qos, job.partition, job.batch_host) == (
        "ml",
        "normal",
        "gpu",
        "h100-11",
    )
    assert job.reason == ""


def test_a_pending_job_says_why_in_slurm_s_words_and_holds_nothing():
    (job,) = read_jobs_oneline(PENDING_2011)
    assert job.pending and job.reason == "QOSMaxGRESPerUser"
    assert job.nodes == () and job.node_count == 4 and job.gpus_allocated == 0
    assert job.gpus_per_node == GresCount(name="gpu", type="a100", count=8)


def _jobs(job: dict[str, Any]) -> str:
    return json.dumps({"meta": {}, "errors": [], "jobs": [job]})


JOB_2402 = {
    "job_id": 4411, "name": "llmgw-r1", "job_state": ["RUNNING"], "state_reason": "None",
    "partition": "gpu", "account": "ml", "qos": "normal", "nodes": "h100-[11-12]",
    "node_count": {"set": True, "infinite": False, "number": 2}, "batch_host": "h100-11",
    "tres_per_node": "gres/gpu:h100=8", "tres_alloc_str": "cpu=32,mem=16G,node=2,gres/gpu=16",
    "gres_detail": ["gpu:h100:8(IDX:0-7)", "gpu:h100:4(IDX:0-3)"],
}  # fmt: skip


def test_squeue_json_of_23_02_on_reads_the_state_list_and_each_node_s_cards():
    (job,) = read_jobs_json(_jobs(JOB_2402))
    assert job.state == "RUNNING" and job.node_count == 2
    assert job.card_indices == {"h100-11": tuple(range(8)), "h100-12": (0, 1, 2, 3)}
    assert job.gpus_allocated == 12


def test_squeue_json_of_22_05_reads_the_state_word():
    job = {**JOB_2402, "job_state": "PENDING", "state_reason": "Priority", "nodes": "",
           "node_count": 2, "gres_detail": [], "tres_alloc_str": "", "tres_per_node": "gres:gpu:h100:8"}  # fmt: skip
    (read,) = read_jobs_json(_jobs(job))
    assert read.pending and read.reason == "Priority" and read.gpus_allocated == 0
    assert read.gpus_per_node == GresCount(name="gpu", type="h100", count=8)


def test_a_job_ended_by_the_scheduler_is_finished_with_its_reason():
    line = PENDING_2011.replace(
        "JobState=PENDING Reason=QOSMaxGRESPerUser", "JobState=TIMEOUT Reason=TimeLimit"
    )
    (job,) = read_jobs_oneline(line)
    assert job.finished and job.reason == "TimeLimit"


@pytest.mark.parametrize(
    ("printed", "job_id"),
    [("4411\n", "4411"), ("4411;cluster-a\n", "4411"), ("  77  ", "77")],
)
def test_sbatch_parsable_is_read_to_the_job_id(printed: str, job_id: str):
    assert read_submitted(printed) == job_id


@pytest.mark.parametrize(
    ("printed", "said"),
    [
        ("", "is empty, not one job id"),
        ("Submitted batch job 12", "not a job id"),
        ("12\n13\n", "not one job id"),
        ("12; rm -rf /", "not a job id and a cluster"),
    ],
)
def test_anything_but_one_job_id_from_sbatch_is_one_sentence(printed: str, said: str):
    with pytest.raises(SlurmOutputUnreadable) as caught:
        read_submitted(printed)
    assert said in caught.value.sentence()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("NodeName=a State=IDLE", "starts with 'NodeName', not JobId"),
        ("JobId=abc JobState=RUNNING", "JobId is 'abc', not a job id"),
        ("JobId=1 Reason=None", "job 1 has no JobState"),
        ("JobId=1 JobState=running!", "not a job state"),
        ("JobId=1 JobState=RUNNING NodeList=h[2-1]", "backwards range"),
        ("JobId=1 JobState=RUNNING NumNodes=many", "NumNodes is 'many', not a count"),
    ],
)
def test_a_malformed_job_line_is_one_sentence(text: str, said: str):
    with pytest.raises(SlurmOutputUnreadable) as caught:
        read_jobs_oneline(text)
    assert said in caught.value.sentence()


@settings(max_examples=400, deadline=None)
@given(
    field=st.sampled_from(sorted(JOB_2402)),
    value=st.sampled_from(
        [None, 0, -1, 10**400, "", "x", [], {}, ["A", 1], True, "h[1-", "gpu:h100:x"]
    ),
)
def test_a_hostile_value_in_any_job_field_is_read_or_refused_in_one_sentence(field, value):
    try:
        read_jobs_json(_jobs({**JOB_2402, field: value}))
    except SlurmOutputUnreadable as refusal:
        assert "\n" not in refusal.sentence()


@settings(max_examples=400, deadline=None)
@given(cut=st.integers(0, len(RUNNING_2311)), junk=st.text(max_size=12))
def test_a_cut_or_spliced_job_line_is_read_or_refused_in_one_sentence(cut: int, junk: str):
    try:
        read_jobs_oneline(RUNNING_2311[:cut] + junk + RUNNING_2311[cut:])
    except SlurmOutputUnreadable as refusal:
        assert refusal.sentence()


def test_the_reason_s_code_and_its_detail_are_read_apart_and_underscored_names_kept():
    line = PENDING_2011.replace(
        "Reason=QOSMaxGRESPerUser", "Reason=ReqNodeNotAvail,_UnavailableNodes:gpu_01"
    )
    (job,) = read_jobs_oneline(line)
    assert job.reason == "ReqNodeNotAvail"
    assert job.reason_detail == "ReqNodeNotAvail, UnavailableNodes:gpu_01"


def test_a_finished_job_holds_no_cards_whichever_format_still_names_its_nodes():
    line = RUNNING_2311.replace("JobState=RUNNING", "JobState=CANCELLED")
    (job,) = read_jobs_oneline(line)
    assert job.finished and job.nodes == ("h100-11", "h100-12")
    assert job.card_indices == {} and job.gpus_allocated == 0
    (from_json,) = read_jobs_json(
        _jobs({**JOB_2402, "job_state": ["CANCELLED"], "gres_detail": []})
    )
    assert from_json.card_indices == {} and from_json.gpus_allocated == 0
