"""The dependency rule of ARCHITECTURE.md, enforced in fresh interpreters."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import llmgw_core

REPO_ROOT = Path(__file__).resolve().parents[2]


def _modules_after_import(module: str, *python_flags: str, path: str | None = None) -> set[str]:
    code = (
        "import sys, json, importlib\n"
        + (f"sys.path.insert(0, {path!r})\n" if path else "")
        + f"importlib.import_module({module!r})\n"
        + "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, *python_flags, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    return set(json.loads(out.stdout))


def _core_modules() -> list[str]:
    return [info.name for info in pkgutil.walk_packages(llmgw_core.__path__, prefix="llmgw_core.")]


def test_the_core_never_imports_textual():
    for module in ["llmgw_core", *_core_modules()]:
        loaded = _modules_after_import(module)
        assert not any(m == "textual" or m.startswith("textual.") for m in loaded), module
        assert not any(m.startswith("llmgw_tui") for m in loaded), module


def test_the_agent_imports_only_the_standard_library():
    agent_root = str(REPO_ROOT / "agent")
    import llmgw_agent

    names = ["llmgw_agent", "llmgw_agent.__main__"] + [
        info.name for info in pkgutil.walk_packages(llmgw_agent.__path__, prefix="llmgw_agent.")
    ]
    stdlib = set(sys.stdlib_module_names) | {"llmgw_agent", "pynvml", "__main__"}
    for module in names:
        loaded = _modules_after_import(module, "-S", path=agent_root)
        foreign = {m.split(".")[0] for m in loaded} - stdlib
        foreign = {m for m in foreign if not m.startswith("_")}
        assert not foreign, f"{module} pulls in {sorted(foreign)}"
        assert not any(m.startswith("llmgw_core") for m in loaded), module
