"""Test-wide helpers: where the shared third-party fixtures live, the environment every
process of the suite starts in, and the order files are handed to the workers.

The fixtures under `../shared/fixtures` are third-party data: tests read them
in place and skip, saying why, where they are absent. They are never copied
into this repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
"""Every process the suite starts (the runner, the demo fleet, its agents) caches bytecode, as
on a user's machine: a sandbox that sets this variable made each of them compile our sources
at every start, a second of CPU for each run of the runner on the demo fleet."""


def _python3_first() -> None:
    """Put the interpreter `python3` runs first on the PATH, where a wrapper stands before it.

    pyenv's shims are a bash script that finds the interpreter and execs it: about 80 ms of
    CPU for every agent a simulated node starts, two seconds for each run of the runner on
    the demo fleet. The interpreter is the same one; only the wrapper is skipped.
    """
    found = shutil.which("python3")
    if found is None:
        return
    try:
        real = subprocess.run(
            [found, "-c", "import sys; print(sys.executable)"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return
    if real and Path(real).is_file() and Path(real).parent != Path(found).parent:
        os.environ["PATH"] = f"{Path(real).parent}{os.pathsep}{os.environ.get('PATH', '')}"


_python3_first()

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("LLMGW_SHARED", REPO_ROOT.parent / "shared"))
HARDWARE = SHARED / "fixtures" / "hardware"
MODELS = SHARED / "fixtures" / "models"


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with a message when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared fixtures are not beside this checkout")
    return path


@pytest.fixture
def hardware_dir() -> Path:
    """The captured hardware outputs (skips where ../shared is absent)."""
    return shared_path("fixtures", "hardware")


@pytest.fixture
def models_dir() -> Path:
    """The real model metadata (skips where ../shared is absent)."""
    return shared_path("fixtures", "models")


LONGEST_FILES = {
    "tests/e2e/test_vllm_real_serve.py": 311,  # three real vLLM starts, a roll, the SDK, the demo
    "tests/slurm/test_slurm_time_limit_live.py": 170,  # Slurm's one-minute limit, checked every 30 s
    "tests/e2e/test_disaggregation_start_demo.py": 70,
    "tests/slurm/test_slurm_keep_live.py": 55,
    "tests/slurm/test_slurm_serve_live.py": 45,
    "tests/slurm/test_slurm_roll_live.py": 40,
    "tests/slurm/test_slurm_demo_up.py": 23,  # demo up --slurm, a serve on the rack, down
    "tests/e2e/test_keep_demo.py": 167,
    "tests/e2e/test_service_demo.py": 125,
    "tests/e2e/test_vllm_vs_sim.py": 109,  # the real vLLM's start on the CPU
    "tests/e2e/test_lora_service_demo.py": 102,  # a kept demo, an apply under a bench
    "tests/tui/test_monkey.py": 70,
    "tests/tui/test_monkey_more.py": 70,
    "tests/e2e/test_service_lease_demo.py": 91,
    "tests/e2e/test_wizard_every_way.py": 75,
    "tests/e2e/test_keep_heal_demo.py": 75,
    "tests/e2e/test_gateway_demo.py": 74,
    "tests/tui/test_gateway_console.py": 61,
    "tests/e2e/test_serve_faults.py": 56,
    "tests/tui/test_typed_input.py": 51,
    "tests/tui/test_wizard_every_kind.py": 49,
    "tests/faults/test_fault_matrix.py": 45,  # the demo fleet's 20 s and OpenSSH's 25 s
    "tests/tui/test_gateway_log_and_heal.py": 42,
    "tests/e2e/test_service_openssh.py": 40,
    "tests/tui/test_serve_wizard_live.py": 39,
    "tests/tui/test_tmux_demo.py": 30,
    "tests/e2e/test_metrics_demo.py": 25,
    "tests/fleet/test_sim_fleet_scale.py": 24,
    "tests/unit/engines/test_vllm_help_real.py": 20,
    "tests/e2e/test_lora_demo.py": 17,
}
"""Seconds a file took in CI, for the files over twenty (`pytest --durations`, summed)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first: xdist hands a worker a whole file at a time, in this order, so
    a long file left to the end would hold the run up while the other workers wait."""

    def weight(item: pytest.Item) -> int:
        path = Path(str(item.fspath)).resolve()
        try:
            name = path.relative_to(REPO_ROOT).as_posix()
        except ValueError:
            return 0
        return -LONGEST_FILES.get(name, 0)

    items.sort(key=weight)


ONE_AT_A_TIME = frozenset(
    {
        "tests/e2e/test_vllm_real_serve.py",
        "tests/e2e/test_vllm_vs_sim.py",
        "tests/unit/engines/test_vllm_help_real.py",
    }
)
"""Files that start the real vLLM, which takes every core it finds while it starts: run one
after the other on one worker, never two vLLMs at once beside the rest of the suite."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadfile` as xdist does it, with two changes: the files are handed out in the
    collected order (longest first, above) rather than by their count of tests, which put the
    long files of one or two tests last; and the files in `ONE_AT_A_TIME` are one unit."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return "the real vLLM" if file in ONE_AT_A_TIME else file

    config.option.loadscopereorder = False
    return LongestFirst(config, log)
