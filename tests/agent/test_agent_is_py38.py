"""The agent runs on Python 3.8: checked by vermin over the whole agent package, not by eye."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "agent" / "llmgw_agent"


def test_vermin_finds_nothing_newer_than_python_3_8_in_the_agent():
    vermin = shutil.which("vermin") or str(Path(sys.executable).parent / "vermin")
    if not Path(vermin).exists():
        pytest.skip("vermin is not installed")
    done = subprocess.run(
        [vermin, "-t=3.8-", "--no-tips", "--violations", str(AGENT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(r"Minimum required versions: ([\d.]+)", done.stdout)
    if found:
        assert tuple(int(p) for p in found.group(1).split(".")) <= (3, 8), done.stdout
