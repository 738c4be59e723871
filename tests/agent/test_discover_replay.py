"""`collect_facts` on capture directories: host, model dirs, simulated memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw_agent.discover import DiscoveryError, collect_facts, read_sim_usage
from llmgw_agent.discover.host import default_route_interface, memory_mib
from llmgw_agent.discover.storage import fs_type_of, parse_mountinfo, scan_model_dir
from llmgw_agent.sim.profiles import write_profile


@pytest.fixture
def state(tmp_path, monkeypatch):
    directory = tmp_path / "state"
    monkeypatch.setenv("LLMGW_AGENT_STATE", str(directory))
    return directory


def test_a_missing_replay_directory_is_refused_with_a_sentence(tmp_path, state):
    with pytest.raises(DiscoveryError, match="does not exist"):
        collect_facts(replay=str(tmp_path / "nowhere"))


def test_the_replay_environment_variable_is_honoured(tmp_path, state, monkeypatch):
    capture = write_profile("l40s", tmp_path / "l40s", hostname="l40s-07")
    monkeypatch.setenv("LLMGW_AGENT_REPLAY", str(capture))
    facts = collect_facts()
    assert facts["source"] == f"replay:{capture}"
    assert facts["host"]["hostname"] == "l40s-07"


def test_a_running_sim_engine_shows_its_memory_and_a_dead_one_is_forgotten(tmp_path, state):
    capture = write_profile("a100-mig", tmp_path / "a100")
    usage_dir = state / "sim-usage"
    usage_dir.mkdir(parents=True)
    (usage_dir / f"{os.getpid()}.json").write_text(
        json.dumps({"pid": os.getpid(), "gpus": [2, "0/mig1"], "used_mib": 30000})
    )
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (usage_dir / f"{dead.pid}.json").write_text(
        json.dumps({"pid": dead.pid, "gpus": [3], "used_mib": 50000})
    )
    facts = collect_facts(replay=str(capture))
    by_label = {g["label"]: g for g in facts["gpus"]}
    assert by_label["2"]["memory_used_mib"] == 30000
    assert by_label["2"]["processes"][-1] == {
        "pid": os.getpid(),
        "name": "sim-engine",
        "used_mib": 30000,
    }
    assert by_label["0/mig1"]["memory_used_mib"] == 12 + 30000
    assert by_label["3"]["memory_used_mib"] == 0
    assert facts["cards"][0]["memory_used_mib"] >= 30000
    assert not (usage_dir / f"{dead.pid}.json").exists()


def test_a_half_written_usage_file_is_skipped(tmp_path):
    (tmp_path / "1.json").write_text('{"pid": ')
    assert read_sim_usage(tmp_path) == []


def _safetensors_model(root, shards, present):
    root.mkdir(parents=True)
    (root / "config.json").write_text("{}")
    weight_map = {f"w{i}": name for i, name in enumerate(shards)}
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    for name in present:
        (root / name).write_bytes(b"\0" * 64)


def test_model_dirs_are_complete_partial_empty_present_or_missing(tmp_path):
    complete = tmp_path / "complete"
    _safetensors_model(
        complete / "Qwen" / "Qwen3-8B",
        ["a.safetensors", "b.safetensors"],
        ["a.safetensors", "b.safetensors"],
    )
    partial = tmp_path / "partial"
    _safetensors_model(partial / "big", ["a.safetensors", "b.safetensors"], ["a.safetensors"])
    (tmp_path / "empty").mkdir()
    (tmp_path / "present").mkdir()
    (tmp_path / "present" / "notes.txt").write_text("hello")
    mounts = [{"path": "/", "fs_type": "ext4"}]
    result = {
        name: scan_model_dir(str(tmp_path / name), mounts)
        for name in ("complete", "partial", "empty", "present", "missing")
    }
    assert {name: entry["state"] for name, entry in result.items()} == {
        "complete": "complete",
        "partial": "partial",
        "empty": "empty",
        "present": "present",
        "missing": "missing",
    }
    assert result["complete"]["models"][0]["name"] == "Qwen/Qwen3-8B"
    assert result["complete"]["models"][0]["format"] == "safetensors"
    assert result["partial"]["models"][0]["missing"] == ["b.safetensors"]


def test_a_hub_cache_with_an_incomplete_blob_is_partial_and_a_gguf_file_is_a_model(tmp_path):
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "model.safetensors").write_bytes(b"\0" * 8)
    blobs = tmp_path / "hub" / "models--org--tiny" / "blobs"
    blobs.mkdir()
    (blobs / "0f3e.incomplete").write_bytes(b"\0")
    gguf = tmp_path / "hub" / "tiny-gguf"
    gguf.mkdir()
    (gguf / "tiny-Q4_K_M.gguf").write_bytes(b"GGUF")
    entry = scan_model_dir(str(tmp_path / "hub"), [])
    models = {m["name"]: m for m in entry["models"]}
    assert models["org/tiny"]["state"] == "partial"
    assert models["tiny-gguf"]["format"] == "gguf"
    assert models["tiny-gguf"]["files"] == ["tiny-Q4_K_M.gguf"]
    assert entry["state"] == "partial"


def test_nfs_is_shared_and_local_disk_is_not():
    mounts = parse_mountinfo(
        "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
        "40 22 0:52 / /models rw,relatime - nfs4 filer:/export/models rw,vers=4.2\n"
        "41 22 0:53 / /mnt/with\\040space rw - lustre 10.0.0.1@o2ib:/fs rw\n"
    )
    assert fs_type_of(Path("/models/qwen"), mounts) == "nfs4"
    assert fs_type_of(Path("/home/user"), mounts) == "ext4"
    assert mounts[2]["path"] == "/mnt/with space"
    assert scan_model_dir("/models/none", mounts)["shared"] is True
    assert scan_model_dir("/home/none", mounts)["shared"] is False


def test_a_replayed_node_can_declare_its_model_dir_shared(tmp_path, state):
    models = tmp_path / "models"
    models.mkdir()
    capture = write_profile(
        "hgx-h100", tmp_path / "h100", mounts=[{"path": str(models), "fs_type": "nfs4"}]
    )
    facts = collect_facts(replay=str(capture), model_dirs=[str(models)])
    assert facts["model_dirs"][str(models)] == {
        "state": "empty",
        "shared": True,
        "fs_type": "nfs4",
        "models": [],
    }


def test_host_values_are_read_from_proc_text():
    assert memory_mib("MemTotal:       263842660 kB\nMemFree: 1 kB\n") == 257658
    route = (
        "Iface\tDestination\tGateway\tFlags\n"
        "eno1\t0000140A\t00000000\t0001\n"
        "eno1\t00000000\t0100140A\t0003\n"
    )
    assert default_route_interface(route) == "eno1"
    assert default_route_interface("Iface\tDestination\n") is None


def test_a_capture_with_the_text_query_instead_of_xml_is_read_too(hardware_dir, tmp_path, state):
    capture = tmp_path / "capture"
    capture.mkdir()
    (capture / "nvidia-smi-q.txt").write_text(
        (hardware_dir / "nvidia-smi-q-text_h100-80gb-hbm3_mig-enabled.txt").read_text()
    )
    (capture / "nvidia-smi-L.txt").write_text(
        (hardware_dir / "nvidia-smi-L_h100-80gb-hbm3_mig-4-instances.txt").read_text()
    )
    facts = collect_facts(replay=str(capture))
    assert facts["errors"] == []
    assert [(g["label"], g["class"], g["uuid"]) for g in facts["gpus"]] == [
        ("0/mig0", "h100-80g-mig-3g.40gb", "MIG-00000000-0000-0000-0000-000000000000"),
        ("0/mig1", "h100-80g-mig-2g.20gb", "MIG-00000001-0000-0000-0000-000000000001"),
        ("0/mig2", "h100-80g-mig-1g.10gb", "MIG-00000002-0000-0000-0000-000000000002"),
        ("0/mig3", "h100-80g-mig-1g.10gb", "MIG-00000003-0000-0000-0000-000000000003"),
    ]
    assert facts["host"]["driver_version"] == "590.48.01"


def test_a_hub_cache_link_to_a_missing_blob_is_partial_and_refs_main_picks_the_snapshot(tmp_path):
    entry = tmp_path / "hub" / "models--org--m"
    old = entry / "snapshots" / "aaa111"
    new = entry / "snapshots" / "bbb222"
    for snapshot in (old, new):
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text("{}")
    (entry / "blobs").mkdir()
    (entry / "blobs" / "f00d").write_bytes(b"\0" * 32)
    (old / "model.safetensors").symlink_to(entry / "blobs" / "f00d")
    (new / "model.safetensors").symlink_to(entry / "blobs" / "gone")
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("aaa111")
    (model,) = scan_model_dir(str(tmp_path / "hub"), [])["models"]
    assert (model["path"], model["state"]) == (str(old), "complete")
    (entry / "refs" / "main").write_text("bbb222")
    (model,) = scan_model_dir(str(tmp_path / "hub"), [])["models"]
    assert (model["state"], model["missing"]) == ("partial", ["model.safetensors"])


def test_pytorch_bin_weights_are_a_model_too(tmp_path):
    model = tmp_path / "models" / "old-model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "pytorch_model.bin").write_bytes(b"\0" * 16)
    entry = scan_model_dir(str(tmp_path / "models"), [])
    assert entry["state"] == "complete"
    assert entry["models"][0]["format"] == "pytorch"
