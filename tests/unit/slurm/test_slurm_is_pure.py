"""llmgw_core.slurm reads text it is given: it runs nothing and imports nothing of I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import llmgw_core.slurm

ALLOWED = {
    "__future__",
    "json",
    "re",
    "itertools",
    "typing",
    "collections",
    "dataclasses",
    "shlex",
    "pydantic",
}
OWN = {"llmgw_core.errors", "llmgw_core.planner.gpu_classes"}
"""Sentences, and the table of GPU classes (a GRES type is read as its class)."""


def test_the_slurm_package_imports_only_pure_modules():
    folder = Path(llmgw_core.slurm.__file__).parent
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if (
                    name.split(".")[0] in ALLOWED
                    or name in OWN
                    or name.startswith("llmgw_core.slurm")
                ):
                    continue
                found.append(f"{path.name} imports {name}")
    assert found == []
