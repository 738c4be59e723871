"""`llmgw doctor`: the checks on simulated nodes, and the command run as a node runs it."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw_agent.discover import collect_facts
from llmgw_agent.doctor import format_checks, run_checks
from llmgw_agent.sim.profiles import write_profile

AGENT_DIR = Path(__file__).resolve().parents[2] / "agent"


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGW_AGENT_STATE", str(tmp_path / "state"))


def _checks(tmp_path, kind, **options):
    facts = collect_facts(replay=str(write_profile(kind, tmp_path / kind, **options)))
    return facts, run_checks(facts)


def _by(checks, name, status):
    return [c for c in checks if c["check"] == name and c["status"] == status]


def _doctor(*args, env=None, cwd="/"):
    """The agent as a node runs it: python3 -S, only agent/ on the path."""
    environment = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(AGENT_DIR),
        "LLMGW_AGENT_STATE": os.environ["LLMGW_AGENT_STATE"],
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-S", "-m", "llmgw_agent", "doctor", *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        timeout=60,
    )


def test_a_healthy_hgx_h100_passes_every_check(tmp_path):
    _, checks = _checks(tmp_path, "hgx-h100")
    assert {c["status"] for c in checks} == {"pass"}
    assert _by(checks, "nvlink", "pass")[0]["message"] == "every card pair is linked by NV18"


def test_a_rail_below_its_rated_speed_is_a_warning_with_a_fix(tmp_path):
    _, checks = _checks(tmp_path, "hgx-h100", degraded_rail="mlx5_3")
    (warning,) = _by(checks, "adapters", "warn")
    assert warning["message"] == (
        "mlx5_3 port 1 (InfiniBand) links at 200 Gb/s, below the 400 Gb/s of its siblings"
    )
    assert "cable" in warning["fix"]


def test_a_tray_that_has_not_joined_its_fabric_fails(tmp_path):
    _, checks = _checks(tmp_path, "gb200-tray", state="not-joined")
    (failure,) = _by(checks, "fabric", "fail")
    assert failure["message"] == (
        "cards 0, 1, 2, 3 not joined to the NVLink fabric (state Completed, status Insufficient Resources)"
    )


def test_a_degraded_tray_warns_and_a_joined_one_passes_with_its_domain(tmp_path):
    _, degraded = _checks(tmp_path, "gb200-tray", state="degraded")
    assert "reduced NVLink bandwidth" in _by(degraded, "fabric", "warn")[0]["message"]
    _, joined = _checks(
        tmp_path / "j", "gb200-tray", cluster_uuid="5c0ffee0-0000-0000-0000-000000000001"
    )
    assert _by(joined, "fabric", "pass")[0]["message"].startswith(
        "every card joined NVLink domain 5c0ffee0-0000-0000-0000-000000000001"
    )
    assert [c["message"] for c in _by(joined, "imex", "pass")] == [
        "IMEX domain UP with 18 node(s)",
        "IMEX channel channel0 present",
    ]


def test_a_domain_member_without_its_imex_channel_fails(tmp_path):
    capture = write_profile("gb200-tray", tmp_path / "tray")
    (capture / "dev" / "nvidia-caps-imex-channels" / "channel0").unlink()
    checks = run_checks(collect_facts(replay=str(capture)))
    (failure,) = _by(checks, "imex", "fail")
    assert "/dev/nvidia-caps-imex-channels/channel0 is missing" in failure["message"]


def test_a_domain_member_without_imex_fails(tmp_path):
    capture = write_profile("gb200-tray", tmp_path / "tray")
    (capture / "nvidia-imex-ctl-N.txt").unlink()
    checks = run_checks(collect_facts(replay=str(capture)))
    assert "IMEX daemon is not installed" in _by(checks, "imex", "fail")[0]["message"]


def test_mig_on_with_nothing_carved_is_named_with_the_commands_that_fix_it(tmp_path):
    _, checks = _checks(tmp_path, "a100-mig")
    (warning,) = _by(checks, "mig", "warn")
    assert warning["message"].startswith("card 1: MIG mode is on but no MIG instance is carved")
    assert "nvidia-smi -i 1 -mig 0" in warning["fix"]


def test_an_nvlink_pair_that_fell_back_to_pcie_fails(tmp_path):
    facts, _ = _checks(tmp_path, "hgx-h100")
    broken = copy.deepcopy(facts)
    broken["nvlink"]["2"]["5"] = "SYS"
    broken["nvlink"]["5"]["2"] = "SYS"
    (failure,) = _by(run_checks(broken), "nvlink", "fail")
    assert failure["message"].endswith("(the others use NV18): 2-5 SYS")


def test_an_unhealthy_fabric_fails_even_with_full_bandwidth(tmp_path):
    facts, _ = _checks(tmp_path, "gb200-tray")
    sick = copy.deepcopy(facts)
    sick["cards"][2]["fabric"].update(verdict="unhealthy")
    sick["cards"][2]["fabric"]["health"]["summary"] = "Unhealthy"
    (failure,) = _by(run_checks(sick), "fabric", "fail")
    assert (
        failure["message"]
        == "card 2 in the NVLink fabric but unhealthy (summary Unhealthy, bandwidth Full)"
    )


def test_a_cpu_node_passes_without_a_driver(tmp_path):
    _, checks = _checks(tmp_path, "cpu")
    assert {c["status"] for c in checks} == {"pass"}
    assert "0 failed" in format_checks(checks)


def test_model_dirs_missing_or_half_downloaded_are_reported(tmp_path):
    half = tmp_path / "models" / "m"
    half.mkdir(parents=True)
    (half / "config.json").write_text("{}")
    (half / "model.safetensors.incomplete").write_text("")
    facts = collect_facts(
        replay=str(write_profile("l40s", tmp_path / "l40s")),
        model_dirs=[str(tmp_path / "models"), str(tmp_path / "absent")],
    )
    checks = run_checks(facts)
    assert _by(checks, "model_dirs", "fail")[0]["message"] == "{} does not exist".format(
        tmp_path / "absent"
    )
    assert "half-downloaded: m" in _by(checks, "model_dirs", "warn")[0]["message"]


def test_plain_doctor_on_a_machine_without_gpus_ends_with_fail_lines_not_a_traceback():
    done = _doctor()
    assert done.returncode == 1
    assert "Traceback" not in done.stderr + done.stdout
    assert "FAIL  driver" in done.stdout
    assert "the NVIDIA driver is not reachable" in done.stdout
    assert "fix: install the NVIDIA driver" in done.stdout


def test_doctor_json_has_one_object_per_check():
    done = _doctor("--json")
    checks = json.loads(done.stdout)["checks"]
    assert {"check", "status", "message", "fix"} == set(checks[0])
    assert any(c["status"] == "fail" for c in checks)


def test_doctor_facts_json_prints_the_replayed_node(tmp_path):
    capture = write_profile("gb200-tray", tmp_path / "tray", tray=5)
    done = _doctor("--replay", str(capture), "--facts", "--json")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert facts["source"] == f"replay:{capture}"
    assert [g["class"] for g in facts["gpus"]] == ["gb200-186g"] * 4


def test_doctor_exits_1_on_a_failed_check_and_2_on_a_missing_replay_dir(tmp_path):
    capture = write_profile("gb200-tray", tmp_path / "tray", state="not-joined")
    assert _doctor("--replay", str(capture)).returncode == 1
    missing = _doctor("--replay", str(tmp_path / "nowhere"))
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_a_capture_of_this_machine_replays_as_this_machine(tmp_path):
    done = _doctor("--capture", str(tmp_path / "cap"))
    assert done.returncode == 0, done.stderr
    assert "not captured: nvidia-smi-q-x.xml" in done.stdout
    assert (tmp_path / "cap" / "capture.json").is_file()
    replayed = collect_facts(replay=str(tmp_path / "cap"))
    assert replayed["host"]["hostname"] == socket.gethostname()
    assert replayed["cards"] == []


def test_a_captured_infiniband_tree_reads_back_as_the_original(hardware_dir, tmp_path):
    from llmgw_agent.discover.capture import copy_sysfs
    from llmgw_agent.discover.ib import read_sysfs

    source = hardware_dir / "sysfs-class-infiniband_h100-node"
    copied = copy_sysfs(source, tmp_path / "sys" / "class" / "infiniband")
    assert copied == 63
    assert read_sysfs(tmp_path / "sys" / "class" / "infiniband") == read_sysfs(source)


def test_a_card_on_the_pci_bus_that_the_driver_lost_fails(tmp_path):
    _, checks = _checks(tmp_path, "hgx-h100", pci_gpus=9)
    (failure,) = _by(checks, "cards", "fail")
    assert failure["message"] == (
        "9 NVIDIA GPU(s) on the PCI bus but only 8 visible to the driver: 8 x h100-80g"
    )
    assert "fallen off the bus" in failure["fix"]


def test_gpus_are_counted_on_the_pci_bus_by_vendor_and_class(tmp_path):
    from llmgw_agent.discover.host import count_pci_gpus

    for name, vendor, pci_class in (
        ("0000:18:00.0", "0x10de", "0x030200"),  # H100: 3D controller
        ("0000:2a:00.0", "0x10de", "0x030200"),
        ("0000:05:00.0", "0x10de", "0x068000"),  # NVSwitch: a bridge, not a GPU
        ("0000:c1:00.0", "0x15b3", "0x020700"),  # ConnectX-7
    ):
        device = tmp_path / name
        device.mkdir()
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(pci_class + "\n")
    assert count_pci_gpus(tmp_path) == 2
    assert count_pci_gpus(tmp_path / "absent") is None


def test_a_mig_mode_change_waiting_for_a_reset_is_a_warning(tmp_path):
    capture = write_profile("a100-mig", tmp_path / "a100")
    xml = capture / "nvidia-smi-q-x.xml"
    text = xml.read_text()
    # Card 3: MIG was switched on with `nvidia-smi -mig 1`, the card not yet reset.
    head, _sep, tail = text.rpartition("<pending_mig>Disabled</pending_mig>")
    xml.write_text(head + "<pending_mig>Enabled</pending_mig>" + tail)
    facts = collect_facts(replay=str(capture))
    assert (facts["cards"][3]["mig_mode"], facts["cards"][3]["mig_pending"]) == (
        "disabled",
        "enabled",
    )
    warnings = [c for c in _by(run_checks(facts), "mig", "warn") if "pending" in c["message"]]
    assert [c["message"] for c in warnings] == [
        "card 3: MIG mode is disabled but enabled is pending until the card is reset"
    ]


def test_the_router_is_reported_with_its_version_and_is_no_engine(tmp_path):
    facts, _ = _checks(tmp_path, "cpu")
    facts = copy.deepcopy(facts)
    facts["engines"] = {"vllm-router": {"version": "0.1.17", "path": "/opt/r/bin/vllm-router"}}
    checks = run_checks(facts)
    (router,) = _by(checks, "router", "pass")
    assert router["message"] == "vllm-router 0.1.17 at /opt/r/bin/vllm-router"
    (engines,) = _by(checks, "engines", "fail")
    assert engines["message"] == "no inference engine found (vLLM, SGLang, llama.cpp)"


def test_a_node_without_a_router_has_no_router_line(tmp_path):
    _, checks = _checks(tmp_path, "cpu")
    assert [c for c in checks if c["check"] == "router"] == []
