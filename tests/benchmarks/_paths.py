"""The tests' import path for a benchmark run as a script.

Benchmarks run as `.venv/bin/python tests/benchmarks/bench_x.py`, outside pytest, so the
`pythonpath` of `[tool.pytest.ini_options]` (tests/support's shared harnesses, the repository
root) does not reach them. One that imports a harness starts with `import _paths` (this
folder is its script's own, so first on the path). The folders are read from
pyproject.toml, the one place they are listed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]


def pytest_pythonpath() -> list[Path]:
    """The folders pytest puts on the path, from pyproject.toml, in its order."""
    with (REPO / "pyproject.toml").open("rb") as file:
        options = tomllib.load(file)["tool"]["pytest"]["ini_options"]
    return [(REPO / folder).resolve() for folder in options.get("pythonpath", [])]


for _folder in reversed(pytest_pythonpath()):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))
