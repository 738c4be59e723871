"""Where an engine is run from on a node, and how its version is read."""

from __future__ import annotations

import pytest

from llmgw_core.engines.programs import (
    at_least,
    engine_program,
    installed_version,
    ray_program,
    version_tuple,
)
from llmgw_core.facts import Engine
from llmgw_core.inventory import BinaryEngine, EngineLocations, PythonEngine

FOUND = {
    "vllm": Engine(version="0.12.0", path="/opt/llm/venv/bin/vllm"),
    "sglang": Engine(version="0.5.3", path="/opt/llm/venv/bin/python3"),
    "llama.cpp": Engine(version="b6500", path="/usr/local/bin/llama-server"),
}


def test_the_inventory_wins_over_what_the_node_found():
    locations = EngineLocations(
        vllm=BinaryEngine(bin="/srv/vllm-0.33/bin/vllm"),
        sglang=PythonEngine(python="/srv/sgl/bin/python"),
        llama_cpp=PythonEngine(python="/srv/lcp/bin/python3"),
    )
    assert engine_program("vllm", locations, FOUND) == ("/srv/vllm-0.33/bin/vllm",)
    assert engine_program("sglang", locations, FOUND) == (
        "/srv/sgl/bin/python",
        "-m",
        "sglang.launch_server",
    )
    assert engine_program("llama.cpp", locations, FOUND) == (
        "/srv/lcp/bin/python3",
        "-m",
        "llama_cpp.server",
    )


def test_what_the_node_found_comes_next():
    assert engine_program("vllm", None, FOUND) == ("/opt/llm/venv/bin/vllm",)
    assert engine_program("sglang", None, FOUND) == (
        "/opt/llm/venv/bin/python3",
        "-m",
        "sglang.launch_server",
    )
    assert engine_program("llama.cpp", None, FOUND) == ("/usr/local/bin/llama-server",)


def test_an_sglang_console_script_is_run_through_the_python_beside_it():
    found = {"sglang": Engine(version="0.5.23", path="/opt/sgl/bin/sglang")}
    assert engine_program("sglang", None, found)[0] == "/opt/sgl/bin/python3"


def test_vllm_found_only_as_a_package_runs_as_a_module():
    found = {"vllm": Engine(version="0.33.0", path="/opt/v/bin/python3")}
    assert engine_program("vllm", None, found) == (
        "/opt/v/bin/python3",
        "-m",
        "vllm.entrypoints.cli.main",
    )


def test_llama_cpp_python_is_used_when_no_llama_server_is_installed():
    found = {"llama-cpp-python": Engine(version="0.3.16", path="/opt/lcp/bin/python3")}
    assert engine_program("llama.cpp", None, found) == (
        "/opt/lcp/bin/python3",
        "-m",
        "llama_cpp.server",
    )
    assert installed_version("llama.cpp", found) == "0.3.16"


def test_nothing_known_runs_the_engines_usual_name_from_the_path():
    assert engine_program("vllm", None, {}) == ("vllm",)
    assert engine_program("sglang", None, {}) == ("python3", "-m", "sglang.launch_server")
    assert engine_program("llama.cpp", EngineLocations(), {}) == ("llama-server",)


def test_the_sim_runs_what_vllm_would():
    assert engine_program("sim", None, FOUND) == ("/opt/llm/venv/bin/vllm",)
    assert installed_version("sim", FOUND) == "0.12.0"


def test_ray_comes_from_vllms_environment():
    assert ray_program(("/opt/llm/venv/bin/vllm",)) == ("/opt/llm/venv/bin/ray",)
    assert ray_program(("vllm",)) == ("ray",)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("0.12.0", (0, 12, 0)),
        ("0.11.0", (0, 11, 0)),
        ("0.12.0rc1+cu128", (0, 12, 0)),
        ("v0.33.0", (0, 33, 0)),
        ("0.10.2.dev3", (0, 10, 2)),
        ("b6500", (6500,)),
        ("", None),
        (None, None),
        ("unknown", None),
    ],
)
def test_versions_are_read_as_numbers(text, parsed):
    assert version_tuple(text) == parsed


def test_version_gates_compare_by_number_not_by_text():
    assert at_least("0.12.0", (0, 12)) is True
    assert at_least("0.33.0", (0, 12)) is True
    assert at_least("0.9.2", (0, 12)) is False
    assert at_least("0.11.0", (0, 12)) is False
    assert at_least("1.0", (0, 12)) is True
    assert at_least(None, (0, 12)) is None
