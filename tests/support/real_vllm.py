"""The real vLLM of this machine (`.ci/install-vllm`'s CPU build) and the tiny model it serves.

Tests that start it skip, saying why, where it is absent; `LLMGW_VLLM` names another
`vllm` command. The model is made once per test module by the vLLM venv's own
Python (`tiny_hf_llama.py`: it needs torch and transformers, which the suite's venv lacks).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM = Path(os.environ.get("LLMGW_VLLM") or REPO_ROOT / ".venv-vllm" / "bin" / "vllm")


def skip_without_real_vllm() -> None:
    """Skip the test, saying how to have one, where no real vLLM is installed."""
    if not VLLM.exists():
        pytest.skip(
            f"no real vLLM at {VLLM}: .ci/run installs the CPU build there where PyTorch's "
            "CPU build lies on the machine's disk; LLMGW_VLLM names another vllm"
        )


_MADE: list[Path] = []
"""The tiny model this process made first: later calls copy it (its weights are random, and
one start of torch and transformers costs 5 s idle, 15 s under the suite)."""


def make_tiny_llama(folder: Path) -> Path:
    """Write the tiny random Llama into `folder` with the vLLM venv's Python; returns it."""
    if _MADE and (_MADE[0] / "config.json").exists():
        shutil.copytree(_MADE[0], folder)
        return folder
    made = subprocess.run(
        [
            str(VLLM.parent / "python"),
            str(REPO_ROOT / "tests/support/tiny_hf_llama.py"),
            str(folder),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    _MADE[:] = [folder]
    return folder
