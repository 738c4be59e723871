"""A key in front of every engine, never on a command line.

The builders give each engine its client key where it reads it from its own
environment, as the shard's `secret_env`; SGLang, which has no such
variable, runs through a shim that appends `--api-key` to `sys.argv` inside
the process. Real processes check what matters: the sim engine started from
the built command refuses a request without the key, exactly where the real
engine does, and no `/proc/<pid>/cmdline` holds the key.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from engine_nodes import h100_cards, h100_node, request

from llmgw_agent.sim.engine.args import engine_kind, parse_engine_argv
from llmgw_core.engines import build_launch
from llmgw_core.engines.keys import KEY_SHIM, SHIM_KEY_VARIABLE
from llmgw_core.errors import BadInput

KEY = "sk-planted-4d1f9e0c7b"
AGENT_ROOT = Path(__file__).resolve().parents[3] / "agent"
SGLANG = ("/opt/llm/venv/bin/python3", "-m", "sglang.launch_server")
LLAMA_SERVER = ("/opt/llama.cpp/bin/llama-server",)
LLAMA_CPP_PYTHON = ("/opt/llm/venv/bin/python3", "-m", "llama_cpp.server")


def _shard(engine: str, program: tuple[str, ...], key: str | None = KEY):
    node = h100_node(gpus=h100_cards(1), program=program, engine_version=None)
    source = "/models/qwen.gguf" if engine == "llama.cpp" else "/models/llama"
    built = request(nodes=(node,), engine=engine, source=source, tensor_parallel=1, api_key=key)
    (shard,) = build_launch(built).shards
    return shard


@pytest.mark.parametrize(
    ("engine", "program", "variable"),
    [
        ("vllm", ("/opt/llm/venv/bin/vllm",), "VLLM_API_KEY"),
        ("llama.cpp", LLAMA_SERVER, "LLAMA_API_KEY"),
        ("llama.cpp", LLAMA_CPP_PYTHON, "API_KEY"),
        ("sglang", SGLANG, SHIM_KEY_VARIABLE),
    ],
)
def test_each_engine_gets_the_key_in_its_own_variable_and_nowhere_else(
    engine: str, program: tuple[str, ...], variable: str
):
    shard = _shard(engine, program)
    assert shard.secret_env == {variable: KEY}
    for command in shard.commands:
        assert KEY not in " ".join(command.argv)
        assert KEY not in str(command.env)
    written = {k: v for k, v in shard.start_args("r").items() if k != "secret_env"}
    assert KEY not in str(written)  # shard.json is made of these


def test_without_a_key_nothing_is_added():
    shard = _shard("sglang", SGLANG, key=None)
    assert shard.secret_env == {}
    assert shard.main.argv[:3] == SGLANG


def test_sglang_with_a_key_runs_through_the_shim_and_the_sim_still_reads_it():
    keyed = _shard("sglang", SGLANG).main.argv
    plain = _shard("sglang", SGLANG, key=None).main.argv
    assert keyed[:4] == (SGLANG[0], "-c", KEY_SHIM, "sglang.launch_server")
    assert keyed[4:] == plain[3:]
    assert engine_kind(list(keyed)) == "sglang"
    assert parse_engine_argv("sglang", list(keyed)) == parse_engine_argv("sglang", list(plain))


def test_sglang_started_by_a_wrapper_cannot_take_a_key_and_says_so():
    with pytest.raises(BadInput, match=r"with a key it must be 'python3 -m sglang.launch_server'"):
        _shard("sglang", ("/usr/local/bin/sglang-wrapper",))


def test_the_shim_puts_the_key_in_sys_argv_only(tmp_path: Path):
    (tmp_path / "fake_server.py").write_text(
        "import os, sys\n"
        "cmdline = open('/proc/self/cmdline', 'rb').read().decode()\n"
        f"print(repr(sys.argv[1:]), {KEY!r} in cmdline, repr(os.environ.get({SHIM_KEY_VARIABLE!r})))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path), SHIM_KEY_VARIABLE: KEY}
    done = subprocess.run(
        [sys.executable, "-c", KEY_SHIM, "fake_server", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split("\n")[0] == f"['--port', '1', '--api-key', '{KEY}'] False None"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("engine", "program", "open_routes", "shut_routes", "refusal"),
    [
        (
            "vllm",
            ("/opt/llm/venv/bin/vllm",),
            ("/health", "/metrics", "/version"),
            ("/v1/models",),
            {"error": "Unauthorized"},
        ),
        (
            "sglang",
            SGLANG,
            ("/health", "/health_generate", "/metrics"),
            ("/v1/models", "/version"),
            {"error": "Unauthorized"},
        ),
        (
            "llama.cpp",
            LLAMA_SERVER,
            ("/health", "/v1/models"),
            ("/metrics", "/version"),
            {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}},
        ),
    ],
)
def test_the_engine_started_from_the_built_command_refuses_a_request_without_the_key(
    engine: str,
    program: tuple[str, ...],
    open_routes: tuple[str, ...],
    shut_routes: tuple[str, ...],
    refusal: dict,
    tmp_path: Path,
):
    port = _free_port()
    shard = _shard(engine, program)
    argv = [a if a != str(shard.http_port) else str(port) for a in shard.main.argv]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LLMGW_")},
        "PYTHONPATH": str(AGENT_ROOT),
        "LLMGW_AGENT_STATE": str(tmp_path / "state"),
        "LLMGW_SIM_LOAD_S": "0",
        **shard.secret_env,
    }
    process = subprocess.Popen(
        [sys.executable, "-S", "-m", "llmgw_agent", "sim-engine", "--", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(base + "/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the sim engine never became healthy"
            time.sleep(0.05)
        assert KEY.encode() not in Path(f"/proc/{process.pid}/cmdline").read_bytes()
        body = {"model": "llama-70b", "messages": [{"role": "user", "content": "hi"}]}
        chat = base + "/v1/chat/completions"
        refused = httpx.post(chat, json=body)
        assert (refused.status_code, refused.json()) == (401, refusal)
        wrong = httpx.post(chat, json=body, headers={"Authorization": "Bearer not-the-key"})
        assert wrong.status_code == 401
        answered = httpx.post(chat, json=body, headers={"Authorization": f"Bearer {KEY}"})
        assert answered.status_code == 200, answered.text
        for route in open_routes:
            assert httpx.get(base + route).status_code == 200, route
        for route in shut_routes:
            assert httpx.get(base + route).status_code == 401, route
            keyed = httpx.get(base + route, headers={"Authorization": f"Bearer {KEY}"})
            assert keyed.status_code == 200, route
    finally:
        process.terminate()
        process.wait(10)
