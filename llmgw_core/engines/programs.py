"""How each engine is run on a node, and which version it is (pure).

Where an engine lives comes from the inventory first (`engines:` per node:
`{vllm: {bin}, sglang: {python}, llama.cpp: {bin} | {python}}`), then from
what the node's agent found installed (`facts.engines`), then the name on
PATH. The version comes from the node's facts only: a flag an older engine
does not know is refused at start-up, after a download, so the builders
gate flags on it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

from llmgw_core.engines.spec import LLAMA_CPP, SGLANG, SIM, VLLM
from llmgw_core.facts import Engine
from llmgw_core.inventory import BinaryEngine, EngineLocations, PythonEngine

VLLM_MODULE = "vllm.entrypoints.cli.main"
SGLANG_MODULE = "sglang.launch_server"
LLAMA_CPP_PYTHON_MODULE = "llama_cpp.server"

DEFAULT_PROGRAMS: dict[str, tuple[str, ...]] = {
    VLLM: ("vllm",),
    SGLANG: ("python3", "-m", SGLANG_MODULE),
    LLAMA_CPP: ("llama-server",),
}
"""What runs an engine when neither the inventory nor the node says where it is."""

# The agent reports llama-cpp-python under its distribution's name.
_LLAMA_CPP_PYTHON = "llama-cpp-python"

_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)")
_LLAMA_BUILD = re.compile(r"^b(\d+)$")


def _is_python(path: str) -> bool:
    return posixpath.basename(path).startswith("python")


def _python_beside(path: str) -> str:
    """The interpreter of the environment a console script or interpreter belongs to."""
    if _is_python(path):
        return path
    return posixpath.join(posixpath.dirname(path), "python3")


def engine_program(
    engine: str, locations: EngineLocations | None, installed: Mapping[str, Engine]
) -> tuple[str, ...]:
    """The argv prefix that runs `engine` on a node.

    Args:
        engine: "vllm" | "sglang" | "llama.cpp" (the sim stands in for vLLM).
        locations: the node's `engines:` from the inventory, None when not given.
        installed: the node's `facts.engines`.
    """
    engine = VLLM if engine == SIM else engine
    if engine == VLLM:
        if locations is not None and locations.vllm is not None:
            return (locations.vllm.bin,)
        found = installed.get(VLLM)
        if found is not None and found.path:
            if _is_python(found.path):
                return (found.path, "-m", VLLM_MODULE)
            return (found.path,)
        return DEFAULT_PROGRAMS[VLLM]
    if engine == SGLANG:
        if locations is not None and locations.sglang is not None:
            return (locations.sglang.python, "-m", SGLANG_MODULE)
        found = installed.get(SGLANG)
        if found is not None and found.path:
            return (_python_beside(found.path), "-m", SGLANG_MODULE)
        return DEFAULT_PROGRAMS[SGLANG]
    if engine == LLAMA_CPP:
        located = locations.llama_cpp if locations is not None else None
        if isinstance(located, BinaryEngine):
            return (located.bin,)
        if isinstance(located, PythonEngine):
            return (located.python, "-m", LLAMA_CPP_PYTHON_MODULE)
        server = installed.get(LLAMA_CPP)
        if server is not None and server.path:
            return (server.path,)
        python_package = installed.get(_LLAMA_CPP_PYTHON)
        if python_package is not None and python_package.path:
            return (_python_beside(python_package.path), "-m", LLAMA_CPP_PYTHON_MODULE)
        return DEFAULT_PROGRAMS[LLAMA_CPP]
    raise ValueError(f"no program for engine {engine!r}")


def named_by_inventory(engine: str, locations: EngineLocations | None) -> bool:
    """Whether the node's inventory entry says where `engine` lives (the sim never is named)."""
    if locations is None or engine == SIM:
        return False
    named = {VLLM: locations.vllm, SGLANG: locations.sglang, LLAMA_CPP: locations.llama_cpp}
    return named.get(engine) is not None


def installed_version(engine: str, installed: Mapping[str, Engine]) -> str | None:
    """The engine's version the node reported, None when it did not."""
    engine = VLLM if engine == SIM else engine
    found = installed.get(engine)
    if found is None and engine == LLAMA_CPP:
        found = installed.get(_LLAMA_CPP_PYTHON)
    return found.version if found is not None else None


def is_llama_cpp_python(program: tuple[str, ...]) -> bool:
    """True when the program is llama-cpp-python's server rather than `llama-server`."""
    return len(program) >= 3 and program[1] == "-m" and program[2] == LLAMA_CPP_PYTHON_MODULE


def ray_program(vllm_program: tuple[str, ...]) -> tuple[str, ...]:
    """`ray`, from the environment vLLM is installed in when that is known."""
    first = vllm_program[0] if vllm_program else "vllm"
    if "/" not in first:
        return ("ray",)
    return (posixpath.join(posixpath.dirname(first), "ray"),)


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    """`0.12.0rc1+cu128` → (0, 12, 0); `b6500` → (6500,); None when unreadable."""
    if not version:
        return None
    text = version.strip()
    build = _LLAMA_BUILD.match(text)
    if build:
        return (int(build.group(1)),)
    match = _VERSION.match(text)
    if not match:
        return None
    return tuple(int(part) for part in match.group(1).split("."))


def at_least(version: str | None, minimum: tuple[int, ...]) -> bool | None:
    """True/False when `version` is/is not at least `minimum`; None when it is unknown."""
    parsed = version_tuple(version)
    if parsed is None:
        return None
    width = max(len(parsed), len(minimum))
    padded = parsed + (0,) * (width - len(parsed))
    return padded >= minimum + (0,) * (width - len(minimum))
