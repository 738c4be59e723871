"""Our llama.cpp flags held to a real llama-server's own `--help` (issue 36).

Every flag an operator may pass (`engines/flags.py`, with the `--no-` form a
default-on flag is turned off by, and the choices it lists) and every flag the
launch writes (on a CPU node and split over two cards, with a key, TLS, flash
attention off and a quantised KV cache) must be one the built llama-server
takes. `.ci/install-llama-server` builds the llama.cpp llama-cpp-python 0.3.36
vendors (b11312); `LLMGW_LLAMA_SERVER` names another build.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from engine_nodes import h100_cards, h100_node, llama_request
from llamacpp_truth import llama_server

from llmgw_core.engines import build_launch
from llmgw_core.engines.flags import FLAGS, flag_name
from llmgw_core.engines.identity import EngineIdentity
from llmgw_core.engines.spec import LoraLaunch

_FLAG_TOKEN = re.compile(r"(?:^|,\s*)(--?[\w][\w-]*)")


@pytest.fixture(scope="module")
def server_help() -> tuple[str, dict[str, str]]:
    """The build's version line, and each flag of its help → the text describing it."""
    server = llama_server()
    if not server:
        pytest.skip(
            "no llama-server here (.ci/install-llama-server builds one; LLMGW_LLAMA_SERVER names one)"
        )
    version = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=30)
    done = subprocess.run([server, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return (version.stdout + version.stderr).strip(), help_flags(done.stdout + done.stderr)


def help_flags(text: str) -> dict[str, str]:
    """`--flag` (and `-f`) → the lines describing it, as llama-server's help prints them."""
    flags: dict[str, str] = {}
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("-") and not line.startswith("-----"):
            forms = re.sub(r",\s+", ", ", line.strip())  # "-c,    --ctx-size N"
            head = re.split(r"\s{2,}", forms, maxsplit=1)[0]
            current = [token for token in _FLAG_TOKEN.findall(head) if not token.startswith("---")]
            for name in current:
                flags[name] = line
        elif current:
            for name in current:
                flags[name] += "\n" + line
    return flags


def test_the_help_is_read_as_llama_server_prints_it():
    text = (
        "----- common params -----\n"
        "-cb,   --cont-batching, -nocb, --no-cont-batching\n"
        "                                        whether to enable continuous batching\n"
        "-ctk,  --cache-type-k TYPE              KV cache data type for K\n"
        "                                        allowed values: f32, f16\n"
        "--jinja, --no-jinja                     whether to use jinja\n"
    )
    found = help_flags(text)
    assert set(found) == {
        "-cb",
        "--cont-batching",
        "-nocb",
        "--no-cont-batching",
        "-ctk",
        "--cache-type-k",
        "--jinja",
        "--no-jinja",
    }
    assert "allowed values: f32, f16" in found["--cache-type-k"]


def test_the_build_is_the_release_our_tables_were_read_from(server_help):
    version, _flags = server_help
    if "0c1e570" not in version:
        pytest.skip(f"another llama-server ({version.splitlines()[0]}): its release is not ours")
    assert "build 11312" in version


def test_every_llama_cpp_flag_an_operator_may_pass_is_one_llama_server_takes(server_help):
    _version, flags = server_help
    missing = []
    for name, flag in FLAGS["llama.cpp"].items():
        spelled = flag_name(name)
        if spelled not in flags:
            missing.append(spelled)
            continue
        # Off is `--no-…`, but for the memory flags the launch writes from the plan itself
        # (`--flash-attn off`: the next test).
        if flag.default_on and not flag.memory and f"--no-{spelled[2:]}" not in flags:
            missing.append(f"--no-{spelled[2:]}")
        listed = flags[spelled]
        missing += [f"{spelled} {choice}" for choice in flag.choices if choice not in listed]
    assert not missing, f"llama-server lacks {missing}"


def _launch_flags(argv: tuple[str, ...]) -> set[str]:
    return {arg for arg in argv[1:] if arg.startswith("-") and not arg[1:2].isdigit()}


def test_every_flag_the_llama_cpp_launch_writes_is_one_llama_server_takes(server_help):
    _version, flags = server_help
    cpu = h100_node(name="cpu-01", gpus=(), adapters=(), fabric=None, program=("llama-server",))
    cards = h100_node(gpus=h100_cards(2), program=("llama-server",))
    written: set[str] = set()
    for node in (cpu, cards):
        launch = build_launch(
            llama_request(
                node,
                concurrency=4,
                api_key="k",
                tls=EngineIdentity.make("qwen-7b"),
                engine_args={"flash_attn": False, "cache_type_k": "q8_0", "repack": False},
                lora=LoraLaunch((("sql", "/a/sql.gguf"),), 1, 8),
            )
        )
        written |= _launch_flags(launch.shards[0].main.argv)
    assert {"--ssl-cert-file", "--n-gpu-layers", "--split-mode", "--no-repack"} <= written
    assert "--lora-scaled" in written
    assert not sorted(written - set(flags)), f"llama-server lacks {sorted(written - set(flags))}"
