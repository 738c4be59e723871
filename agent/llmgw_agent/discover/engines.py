"""Which inference engines a node has, and their versions, without importing them.

Importing vLLM takes seconds (torch); the version is read from the package's
`*.dist-info` directory next to the interpreter that owns the console script,
and `llama-server --version` is asked with a short timeout.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from llmgw_agent.executables import which

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

EXTRA_PREFIXES_ENV = "LLMGW_ENGINE_PREFIXES"
"""Colon-separated extra environment prefixes (virtualenvs, conda envs) to look in."""

ROUTER = "vllm-router"
"""The gateway's router, reported beside the engines under this name."""

# engine name -> (console script, distribution name)
_PYTHON_ENGINES = (
    ("vllm", "vllm", "vllm"),
    ("sglang", "sglang", "sglang"),
    ("llama-cpp-python", None, "llama_cpp_python"),
    # Not an engine: the gateway's router, found the same way (doctor checks it apart).
    (ROUTER, "vllm-router", "vllm_router"),
    # Not an engine either: the Ray vLLM may join nodes through; its version decides whether
    # it can authenticate its cluster (llmgw_core/engines/ray_cluster.py).
    ("ray", "ray", "ray"),
)


def _prefixes(scripts: List[Path]) -> List[Path]:
    prefixes: List[Path] = []
    for script in scripts:
        prefixes.append(script.resolve().parent.parent)
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        if os.environ.get(name):
            prefixes.append(Path(os.environ[name]))
    for extra in os.environ.get(EXTRA_PREFIXES_ENV, "").split(":"):
        if extra:
            prefixes.append(Path(extra))
    prefixes += [Path("/usr/local"), Path("/usr"), Path.home() / ".local"]
    unique: List[Path] = []
    for prefix in prefixes:
        if prefix not in unique:
            unique.append(prefix)
    return unique


def dist_version(prefix: Path, distribution: str) -> Optional[str]:
    """The version of `distribution` installed under an environment prefix, or None."""
    pattern = re.compile(r"^{}-([^-]+)\.dist-info$".format(re.escape(distribution)), re.I)
    for lib in ("lib", "lib64"):
        base = prefix / lib
        if not base.is_dir():
            continue
        for python_dir in base.glob("python3*"):
            for packages in ("site-packages", "dist-packages"):
                directory = python_dir / packages
                if not directory.is_dir():
                    continue
                for entry in directory.iterdir():
                    match = pattern.match(entry.name)
                    if match:
                        return match.group(1)
    return None


def llama_server_version(path: str, timeout_s: float = 5.0) -> Optional[str]:
    """`llama-server --version` -> `b5432` style build number, or None."""
    import subprocess  # a live node with llama-server only

    try:
        done = subprocess.run(
            [path, "--version"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return llama_server_build(done.stdout.decode(errors="replace"))


def llama_server_build(text: str) -> Optional[str]:
    """The build number in `llama-server --version`'s output, as `b11312`, or None.

    Builds before the 0.5 versioning print `version: 6500 (8ff2060)`; later ones
    `version: 0.5.0-dev (build 11312, commit 0c1e570)`, whose build number is the release.
    """
    match = re.search(r"\bbuild\s+([0-9]+)", text) or re.search(r"version:\s*([0-9]+)\s*\(", text)
    return "b" + match.group(1) if match else None


def live_engines() -> Dict[str, Dict[str, Any]]:
    """`{engine: {version, path}}` for the engines found on this node."""
    found: Dict[str, Dict[str, Any]] = {}
    scripts = []
    for _, script, _ in _PYTHON_ENGINES:
        located = which(script) if script else None
        if located:
            scripts.append(Path(located))
    for engine, script, distribution in _PYTHON_ENGINES:
        located = which(script) if script else None
        for prefix in _prefixes(scripts):
            version = dist_version(prefix, distribution)
            if version:
                python = prefix / "bin" / "python3"
                if engine == ROUTER and not located:
                    # The router runs as its own console script, never as `python3 -m`.
                    beside = prefix / "bin" / str(script)
                    located = str(beside) if beside.exists() else None
                found[engine] = {
                    "version": version,
                    "path": located or (str(python) if python.exists() else str(prefix)),
                }
                break
    server = which("llama-server")
    if server:
        found["llama.cpp"] = {"version": llama_server_version(server), "path": server}
    return found


def replay_engines(recorded: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Engines as a capture's `host.json` lists them (`{name: {version, path}}`).

    `recorded` is `host.read_host_json`'s: each value already an engine
    object or a version string (`HOST_SCHEMA`).
    """
    engines = recorded.get("engines") or {}
    result: Dict[str, Dict[str, Any]] = {}
    for name, value in engines.items():
        if isinstance(value, dict):
            result[name] = {"version": value.get("version"), "path": value.get("path")}
        else:
            result[name] = {"version": value, "path": None}
    return result
