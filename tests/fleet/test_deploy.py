"""The agent zipapp: the same source always gives the same bytes, hence the same name."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

from llmgw_core.fleet.deploy import agent_bundle, agent_source_dir, build_bundle, serve_command


def test_the_same_source_gives_the_same_bytes_and_name(tmp_path: Path):
    copy = tmp_path / "llmgw_agent"
    shutil.copytree(agent_source_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "junk.cpython-311.pyc").write_bytes(b"\0" * 10)
    first = build_bundle(copy)
    (copy / "paths.py").touch()  # a new mtime changes nothing
    assert build_bundle(copy) == first
    assert first == agent_bundle()
    assert first.file_name == f"agent-{first.sha12}.pyz" and len(first.sha12) == 12


def test_a_changed_agent_gets_a_new_name(tmp_path: Path):
    copy = tmp_path / "llmgw_agent"
    shutil.copytree(agent_source_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "paths.py").open("a") as handle:
        handle.write("\n# changed\n")
    assert build_bundle(copy).sha12 != agent_bundle().sha12


def test_entries_are_sorted_with_fixed_times_and_no_caches():
    bundle = agent_bundle()
    assert bundle.payload.startswith(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(BytesIO(bundle.payload)) as archive:
        names = archive.namelist()
        infos = archive.infolist()
    assert names == sorted(names)
    assert names[0] == "__main__.py"
    assert "llmgw_agent/protocol.py" in names
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    assert {info.date_time for info in infos} == {(1980, 1, 1, 0, 0, 0)}


def test_the_zipapp_runs_with_nothing_but_the_standard_library(tmp_path: Path):
    pyz = tmp_path / agent_bundle().file_name
    pyz.write_bytes(agent_bundle().payload)
    done = subprocess.run(
        [sys.executable, "-S", str(pyz), "serve"], input='{"id": 1, "op": "ping"}\n',
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
    )  # fmt: skip
    hello, answer = done.stdout.splitlines()
    assert '"protocol":1' in hello
    assert answer.startswith('{"id":1,"ok":true')


def test_the_serve_command_says_absent_then_passes_odd_paths_intact(tmp_path: Path):
    state_dir = tmp_path / "it's a state dir; $(touch pwned)"
    command = serve_command(state_dir=str(state_dir))
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    absent = subprocess.run(
        ["/bin/sh", "-c", command], capture_output=True, text=True, env=env, timeout=10
    )
    assert absent.stdout.strip() == '{"absent": true}'
    cache = tmp_path / ".cache" / "llmgw"
    cache.mkdir(parents=True)
    (cache / agent_bundle().file_name).write_bytes(agent_bundle().payload)
    served = subprocess.run(
        ["/bin/sh", "-c", command], input='{"id": 1, "op": "claims"}\n',
        capture_output=True, text=True, env=env, timeout=30, cwd=tmp_path,
    )  # fmt: skip
    assert served.stdout.splitlines()[1].startswith('{"id":1,"ok":true')
    assert state_dir.is_dir()
    assert not (tmp_path / "pwned").exists()
