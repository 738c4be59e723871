"""The live path (no replay): real `nvidia-smi` processes on the PATH, as on a node.

The stand-in `nvidia-smi` is a shell script that prints a real capture, or
fails the way the real one does when the driver is gone.
"""

from __future__ import annotations

import stat

import pytest

from llmgw_agent.discover import collect_facts
from llmgw_agent.doctor import run_checks


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", f"{directory}:/usr/bin:/bin")
    monkeypatch.setenv("LLMGW_AGENT_STATE", str(tmp_path / "state"))
    monkeypatch.delenv("LLMGW_AGENT_REPLAY", raising=False)
    return directory


def _tool(directory, name, body):
    path = directory / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_nvidia_smi_output_on_a_live_node_becomes_the_same_facts(hardware_dir, bin_dir):
    xml = hardware_dir / "nvidia-smi-q-x_h100-80gb-hbm3_8gpu_hgx.xml"
    listing = hardware_dir / "nvidia-smi-L_h100-80gb-hbm3_8gpu_no-mig.txt"
    topo = hardware_dir / "topo-m_h100-80gb-hbm3_8gpu_8nic-mlx5.txt"
    _tool(
        bin_dir,
        "nvidia-smi",
        f'case "$*" in\n  "-q -x") cat "{xml}" ;;\n  "-L") cat "{listing}" ;;\n  "topo -m") cat "{topo}" ;;\n'
        "  *) exit 2 ;;\nesac",
    )
    facts = collect_facts()
    assert facts["source"] == "nvidia-smi"
    assert facts["errors"] == []
    assert [c["class"] for c in facts["cards"]] == ["h100-80g"] * 8
    assert facts["host"]["driver_version"] == "580.105.08"
    assert facts["cards"][3]["nearest_nic"] == "mlx5_3"
    assert facts["nvlink"]["0"]["7"] == "NV18"
    checks = run_checks(facts)
    assert [c["status"] for c in checks if c["check"] == "driver"] == ["pass"]
    assert [c["message"] for c in checks if c["check"] == "nvml"] == [
        "NVML is not used (pynvml is not installed): facts come from nvidia-smi"
    ]


def test_an_nvidia_smi_that_lost_its_driver_is_a_fail_line_with_its_own_words(bin_dir):
    _tool(
        bin_dir,
        "nvidia-smi",
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        'Make sure that the latest NVIDIA driver is installed and running."\nexit 9',
    )
    facts = collect_facts()
    assert facts["source"] == "none"
    assert facts["cards"] == []
    (driver,) = [c for c in run_checks(facts) if c["check"] == "driver"]
    assert driver["status"] == "fail"
    assert "couldn't communicate with the NVIDIA driver" in driver["message"]
