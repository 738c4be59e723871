"""Files on the operator's machine a step names are read from the script's folder."""

from __future__ import annotations

from pathlib import Path

from llmgw_core.script.context import StepContext


def test_a_relative_file_is_beside_the_script_an_absolute_or_home_one_as_given(tmp_path: Path):
    ctx = StepContext(script_dir=tmp_path, described_fleet=None, inventory=None, demo=False)
    assert ctx.local_path("keys.yaml") == tmp_path / "keys.yaml"
    assert ctx.local_path("/etc/llmgw/keys.yaml") == Path("/etc/llmgw/keys.yaml")
    assert ctx.local_path("~/keys.yaml") == Path.home() / "keys.yaml"
