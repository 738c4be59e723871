"""The node readers across Slurm's versions, and their refusals.

The live cluster's own output (Debian's 22.05) is read in tests/slurm/; here are the shapes
other versions print, written from Slurm's documented field names (docs/slurm.md says where
each comes from): one node per version family, small, in our own words.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw_core.slurm.nodes import read_nodes_json, read_nodes_oneline, read_states
from llmgw_core.slurm.text import SlurmOutputUnreadable
from llmgw_core.slurm.version import read_version


def _document(node: dict[str, Any], plugin: str) -> str:
    return json.dumps({"meta": {"plugin": {"type": plugin}}, "errors": [], "nodes": [node]})


def _no_val(number: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": number}


# sinfo --json of 21.08 (openapi/v0.0.37) and 22.05 (v0.0.38): state a word, flags apart,
# features a comma string, counts plain numbers.
NODE_2205 = {
    "name": "gpu-07", "hostname": "gpu-07.cluster", "address": "10.1.0.7",
    "state": "mixed", "state_flags": ["DRAIN"], "reason": "ECC errors on card 3",
    "partitions": ["gpu", "debug"], "features": "h100,nvlink,ib", "active_features": "h100,nvlink,ib",
    "cpus": 112, "alloc_cpus": 16, "real_memory": 2_000_000, "alloc_memory": 64_000,
    "gres": "gpu:h100:8(S:0-1)", "gres_used": "gpu:h100:3(IDX:0-2)", "tres_used": "cpu=16,mem=62.50G",
}  # fmt: skip
# scontrol --json show node of 23.02 (data_parser v0.0.39) to 25.05 (v0.0.43): state a
# list, features a list, some counts {"set", "infinite", "number"}.
NODE_2311 = {
    "name": "gb200-r1-t04", "hostname": "gb200-r1-t04", "address": "10.2.0.4",
    "state": ["IDLE", "DRAIN", "NOT_RESPONDING"], "reason": "Not responding",
    "partitions": ["nvl72"], "features": ["gb200", "nvl72", "rack1"], "active_features": ["gb200", "nvl72"],
    "cpus": 144, "alloc_cpus": 0, "real_memory": 884_000, "alloc_memory": 0,
    "free_mem": _no_val(850_000), "boot_time": _no_val(1_700_000_000),
    "gres": "gpu:gb200:4", "gres_used": "gpu:gb200:0(IDX:N/A)", "tres_used": None,
}  # fmt: skip


def test_22_05_json_reads_state_flags_features_and_the_cards_in_use():
    (node,) = read_nodes_json(_document(NODE_2205, "openapi/v0.0.38"))
    assert node.states == ("MIXED", "DRAIN") and node.state == "MIXED" and not node.available
    assert node.reason == "ECC errors on card 3"
    assert node.partitions == ("gpu", "debug") and node.features == ("h100", "nvlink", "ib")
    assert (node.cpus, node.cpus_allocated) == (112, 16)
    assert (node.memory_mib, node.memory_allocated_mib) == (2_000_000, 64_000)
    assert node.gpu_types == ("h100",) and node.gpu_count == 8
    assert (node.gpus_used, node.gpus_free) == (3, 5)


def test_23_json_reads_state_lists_feature_lists_and_counted_objects():
    (node,) = read_nodes_json(_document(NODE_2311, "data_parser/v0.0.40"))
    assert node.states == ("IDLE", "DRAIN", "NOT_RESPONDING")
    assert node.features == ("gb200", "nvl72", "rack1") and node.active_features == (
        "gb200",
        "nvl72",
    )
    assert node.gpu_count == 4 and node.gpus_used == 0 and node.gpus_free == 4


def test_the_21_08_json_without_state_flags_reads_the_same():
    node = {**NODE_2205, "state": "idle"}
    del node["state_flags"]
    (read,) = read_nodes_json(_document(node, "openapi/v0.0.37"))
    assert read.states == ("IDLE",) and read.available


def test_cards_in_use_fall_back_to_tres_where_gres_used_is_absent():
    node = {**NODE_2205, "tres_used": "cpu=16,mem=62.50G,gres/gpu=6,gres/gpu:h100=6"}
    del node["gres_used"]
    (read,) = read_nodes_json(_document(node, "openapi/v0.0.38"))
    assert read.gpus_used == 6


def test_a_site_that_calls_its_cards_otherwise_names_them_with_gres_name():
    node = {**NODE_2205, "gres": "tpu:v5:4,gpu:l4:1", "gres_used": "tpu:v5:1(IDX:0),gpu:l4:0"}
    (read,) = read_nodes_json(_document(node, "openapi/v0.0.38"), gres_name="tpu")
    assert read.gpu_types == ("v5",) and read.gpu_count == 4 and read.gpus_used == 1


def test_sinfo_grouped_json_of_23_02_on_is_refused_with_the_command_to_use():
    text = json.dumps({"meta": {}, "errors": [], "sinfo": [{"node": {"state": ["IDLE"]}}]})
    with pytest.raises(SlurmOutputUnreadable) as caught:
        read_nodes_json(text, "sinfo --json")
    assert caught.value.sentence() == (
        "sinfo --json is sinfo's grouped JSON of Slurm 23.02 or later, not a node list: "
        "read nodes with `scontrol --json show node` on that version"
    )


ONE_LINE_2011 = (
    "NodeName=dgx-01 Arch=x86_64 CoresPerSocket=64 CPUAlloc=128 CPUTot=256 CPULoad=3.02 "
    "AvailableFeatures=a100,dgx ActiveFeatures=a100,dgx Gres=gpu:a100:8 NodeAddr=dgx-01 "
    "NodeHostName=dgx-01 Version=20.11.9 OS=Linux 5.4.0-150-generic #167-Ubuntu SMP "
    "RealMemory=1000000 AllocMem=500000 FreeMem=900000 Sockets=2 Boards=1 State=ALLOCATED "
    "ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=batch "
    "BootTime=2024-01-01T00:00:00 SlurmdStartTime=2024-01-01T00:01:00 "
    "CfgTRES=cpu=256,mem=1000000M,billing=256,gres/gpu=8 AllocTRES=cpu=128,mem=500000M,gres/gpu=8 "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s"
)
ONE_LINE_2405 = (
    "NodeName=h100-12 Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUEfctv=112 CPUTot=112 "
    "CPULoad=0.10 AvailableFeatures=h100,ib ActiveFeatures=h100 Gres=gpu:h100:8(S:0-1) "
    "GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A) NodeAddr=10.0.0.12 NodeHostName=h100-12 "
    "Version=24.05.1 OS=Linux 6.8.0 #1 SMP RealMemory=2000000 AllocMem=0 FreeMem=N/A "
    "Sockets=2 Boards=1 State=DOWN*+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions=gpu,long BootTime=None SlurmdStartTime=None "
    "LastBusyTime=2024-06-01T10:00:00 ResumeAfterTime=None CfgTRES=cpu=112,mem=2000000M "
    "AllocTRES= CurrentWatts=0 AveWatts=0 Reason=GPU 3 fell off the bus State=DOWN "
    "[root@2024-06-01T10:05:00]"
)


def test_a_20_11_line_without_gres_used_reads_the_cards_from_alloc_tres():
    (node,) = read_nodes_oneline(ONE_LINE_2011)
    assert node.states == ("ALLOCATED",) and node.cpus == 256 and node.memory_mib == 1_000_000
    assert node.gpu_count == 8 and node.gpus_used == 8 and node.gpus_free == 0


def test_a_24_05_line_reads_a_reason_holding_an_equals_sign_and_a_not_responding_node():
    (node,) = read_nodes_oneline(ONE_LINE_2405)
    assert node.states == ("DOWN", "DRAIN", "NOT_RESPONDING") and not node.available
    assert node.reason == "GPU 3 fell off the bus State=DOWN"
    assert node.partitions == ("gpu", "long") and node.active_features == ("h100",)
    assert node.gpus_used == 0 and node.address == "10.0.0.12"


def test_without_gres_used_or_tracked_tres_the_cards_in_use_are_unknown_not_zero():
    line = ONE_LINE_2011.replace(
        ",gres/gpu=8 AllocTRES=cpu=128,mem=500000M,gres/gpu=8", " AllocTRES=cpu=1"
    )
    (node,) = read_nodes_oneline(line)
    assert node.gpus_used is None and node.gpus_free is None


@pytest.mark.parametrize(
    ("state", "flags", "read"),
    [
        ("IDLE+CLOUD+POWERED_DOWN", None, ("IDLE", "CLOUD", "POWERED_DOWN")),
        ("IDLE~", None, ("IDLE", "POWERED_DOWN")),
        ("mixed", ["COMPLETING"], ("MIXED", "COMPLETING")),
        (["ALLOCATED", "PLANNED"], None, ("ALLOCATED", "PLANNED")),
    ],
)
def test_states_read_the_same_whichever_version_wrote_them(state, flags, read):
    assert read_states(state, flags, "state") == read


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", None),
        ("JobId=1 JobState=RUNNING", "holds a record that starts with 'JobId', not NodeName"),
        ("NodeName=a CPUTot=8", "node a has no State"),
        ("NodeName=a State=IDLE CPUTot=eight", "node a's CPUTot is 'eight', not a count"),
        ("NodeName=a State=IDLE Gres=gpu:h100:lots", "whose count is not a number"),
        ("NodeName=a State=IDLE GresUsed=gpu:h100:1(IDX:3-1)", "whose IDX range is not one"),
        ("NodeName=a State=id;le", "not a node state"),
        ("hello world", "does not start with a Key=value pair"),
        ("NodeName=a\x1b[2J State=IDLE", "holds a control character"),
    ],
)
def test_a_malformed_line_is_one_sentence(text: str, said: str | None):
    if said is None:
        assert read_nodes_oneline(text) == []
        return
    with pytest.raises(SlurmOutputUnreadable) as caught:
        read_nodes_oneline(text, "scontrol show node")
    assert said in caught.value.sentence() and caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("not json", "is not JSON"),
        ("[1, 2]", "is a list, not a JSON object"),
        ('{"nodes": "all"}', "has no 'nodes' list"),
        (
            '{"errors": [{"error": "Unable to contact slurm controller"}], "nodes": []}',
            "reports an error: 'Unable to contact",
        ),
        ('{"nodes": [{"name": "a", "state": 7}]}', "node a's state is 7, not a node state"),
        ('{"nodes": [{"name": "a b", "state": "idle"}]}', "which holds a space"),
        (
            '{"nodes": [{"name": "a", "state": "idle", "cpus": -4}]}',
            "node a's cpus is -4, not a count",
        ),
        (
            '{"nodes": [{"name": "a", "state": "idle", "cpus": "8"}]}',
            "node a's cpus is '8', not a number",
        ),
        (
            '{"nodes": [{"name": "a", "state": "idle", "features": {"x": 1}}]}',
            "is an object, not a list of names",
        ),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_malformed_json_is_one_sentence(text: str, said: str):
    with pytest.raises(SlurmOutputUnreadable) as caught:
        read_nodes_json(text, "scontrol --json show node")
    sentence = caught.value.sentence()
    assert said in sentence and "\n" not in sentence and len(sentence) < 300


HOSTILE: list[Any] = [
    math.nan, math.inf, 1e308, 10**400, -(2**70), -1, 0, "", "x", "a:b:c", True, None, [], {},
    [1, "a"], {"set": True, "number": "x"}, "gpu:h100:99999999999999", "IDLE+", "(IDX:0-)",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    base=st.sampled_from([NODE_2205, NODE_2311]),
    field=st.sampled_from(sorted(set(NODE_2205) | set(NODE_2311))),
    value=st.sampled_from(HOSTILE),
)
def test_a_hostile_value_in_any_field_is_read_or_refused_in_one_sentence(base, field, value):
    text = json.dumps({"nodes": [{**base, field: value}]})
    try:
        read_nodes_json(text)
    except SlurmOutputUnreadable as refusal:
        assert "\n" not in refusal.sentence() and len(refusal.sentence()) < 400


@settings(max_examples=400, deadline=None)
@given(cut=st.integers(0, len(ONE_LINE_2405)), junk=st.text(max_size=12))
def test_a_cut_or_spliced_line_is_read_or_refused_in_one_sentence(cut: int, junk: str):
    text = ONE_LINE_2405[:cut] + junk + ONE_LINE_2405[cut:]
    try:
        read_nodes_oneline(text)
    except SlurmOutputUnreadable as refusal:
        assert refusal.sentence()


@pytest.mark.parametrize(
    ("printed", "release", "listing"),
    [
        ("slurm 20.11.9", (20, 11), "oneline"),
        ("slurm 21.08.8-2", (21, 8), "sinfo-json"),
        ("slurm-wlm 22.05.8", (22, 5), "sinfo-json"),
        ("slurm 23.02.7", (23, 2), "scontrol-json"),
        ("slurm 24.11.0-0rc1", (24, 11), "scontrol-json"),
        ("slurm 25.05.2\n", (25, 5), "scontrol-json"),
    ],
)
def test_the_version_decides_which_node_listing_to_read(printed, release, listing):
    version = read_version(printed)
    assert version.release == release and version.node_listing == listing


@pytest.mark.parametrize(
    ("printed", "said"),
    [
        ("bash: scontrol: command not found", "not a Slurm version: is this a Slurm login node?"),
        ("slurm 19.05.5", "Slurm 19.05.5 is older than 20.11"),
    ],
)
def test_a_login_that_is_not_slurm_or_too_old_is_one_sentence(printed, said):
    with pytest.raises(SlurmOutputUnreadable) as caught:
        read_version(printed)
    assert said in caught.value.sentence()


@pytest.mark.parametrize("given", [None, 7, b"\xff\xfe", ["nodes"]])
def test_output_that_is_not_text_is_one_sentence_for_every_reader(given):
    from llmgw_core.slurm.jobs import read_jobs_json, read_jobs_oneline, read_submitted

    readers = (
        read_nodes_json,
        read_nodes_oneline,
        read_jobs_json,
        read_jobs_oneline,
        read_submitted,
        read_version,
    )
    for reader in readers:
        with pytest.raises(SlurmOutputUnreadable) as caught:
            reader(given)
        assert "UTF-8" in caught.value.sentence() or "not text" in caught.value.sentence()
