"""Finding installed engines and their versions without importing them."""

from __future__ import annotations

import json
import os
import stat

import pytest

from llmgw_agent.discover import collect_facts
from llmgw_agent.discover.engines import (
    dist_version,
    live_engines,
    llama_server_build,
    llama_server_version,
)
from llmgw_agent.sim.profiles import write_profile


def _dist(prefix, name, version):
    site = prefix / "lib" / "python3.10" / "site-packages"
    (site / f"{name}-{version}.dist-info").mkdir(parents=True)


def _script(directory, name, body):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_version_is_read_from_the_dist_info_directory(tmp_path):
    _dist(tmp_path, "vllm", "0.11.0")
    assert dist_version(tmp_path, "vllm") == "0.11.0"
    assert dist_version(tmp_path, "sglang") is None


def test_an_engine_in_a_virtualenv_is_found_through_its_console_script(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    _dist(venv, "vllm", "0.10.2")
    _dist(venv, "sglang", "0.5.3")
    _script(venv / "bin", "vllm", "exit 0")
    server = _script(tmp_path / "llama" / "bin", "llama-server", 'echo "version: 6500 (1a2b3c4d)"')
    monkeypatch.setenv("PATH", "{}:{}".format(venv / "bin", server.parent))
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX", "LLMGW_ENGINE_PREFIXES"):
        monkeypatch.delenv(name, raising=False)
    engines = live_engines()
    assert engines["vllm"] == {"version": "0.10.2", "path": str(venv / "bin" / "vllm")}
    assert engines["sglang"]["version"] == "0.5.3"
    assert engines["llama.cpp"] == {"version": "b6500", "path": str(server)}


def test_extra_prefixes_find_an_engine_off_the_path(tmp_path, monkeypatch):
    _dist(tmp_path / "opt", "llama_cpp_python", "0.3.16")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("LLMGW_ENGINE_PREFIXES", str(tmp_path / "opt"))
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX"):  # an activated environment is looked in first
        monkeypatch.delenv(name, raising=False)
    assert live_engines()["llama-cpp-python"]["version"] == "0.3.16"


@pytest.mark.parametrize(
    ("printed", "build"),
    [
        ("version: 6500 (1a2b3c4d)\nbuilt with cc for x86_64-linux-gnu", "b6500"),
        # llama.cpp 0.5's versioning (b11312, 2026-10-01), the build .ci/install-llama-server makes.
        ("version: 0.5.0-dev (build 11312, commit 0c1e570)\nbuilt with GNU 12.2.0", "b11312"),
        ("version: 0.5.0-dev\n", None),
        ("usage: llama-server [options]", None),
    ],
)
def test_llama_servers_build_is_read_from_both_version_formats(printed, build):
    assert llama_server_build(printed) == build


def test_a_llama_server_that_does_not_answer_has_no_version(tmp_path):
    hung = _script(tmp_path, "llama-server", "exec sleep 5")
    assert llama_server_version(str(hung), timeout_s=0.2) is None


def test_a_broken_host_json_is_a_sentence_in_the_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGW_AGENT_STATE", str(tmp_path / "state"))
    capture = write_profile("l40s", tmp_path / "l40s")
    (capture / "host.json").write_text("{not json")
    facts = collect_facts(replay=str(capture))
    assert any("host.json is not JSON" in e for e in facts["errors"])
    assert len(facts["cards"]) == 4


@pytest.mark.skipif(not os.path.exists("/proc/self/mountinfo"), reason="needs Linux /proc")
def test_this_machine_reports_cpus_memory_and_python(monkeypatch, tmp_path):
    from llmgw_agent.discover.host import live_host

    host = live_host()
    assert host["cpus"] >= 1
    assert host["memory_mib"] > 256
    assert host["python"].count(".") == 2
    json.dumps(host)


def test_the_gateways_router_is_found_like_an_engine_by_its_console_script(tmp_path, monkeypatch):
    venv = tmp_path / "router-venv"
    _dist(venv, "vllm_router", "0.1.17")
    script = _script(venv / "bin", "vllm-router", "exit 0")
    monkeypatch.setenv("PATH", str(venv / "bin"))
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX", "LLMGW_ENGINE_PREFIXES"):
        monkeypatch.delenv(name, raising=False)
    assert live_engines()["vllm-router"] == {"version": "0.1.17", "path": str(script)}


def test_a_router_off_the_path_is_reported_as_its_own_script_not_the_python_beside_it(
    tmp_path, monkeypatch
):
    # sshd sessions have a bare PATH: the router is found by the prefix an operator names.
    venv = tmp_path / "router-venv"
    _dist(venv, "vllm_router", "0.1.17")
    script = _script(venv / "bin", "vllm-router", "exit 0")
    _script(venv / "bin", "python3", "exit 0")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("LLMGW_ENGINE_PREFIXES", str(venv))
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    assert live_engines()["vllm-router"] == {"version": "0.1.17", "path": str(script)}
