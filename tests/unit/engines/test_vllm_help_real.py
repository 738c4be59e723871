"""Our vLLM flags held to the installed vLLM's own `vllm serve --help=all` (issue 36).

Every flag an operator may pass (`engines/flags.py`, the choices it lists
included) and every flag the launch writes (one node, tensor and expert
parallel, quantisation, TLS, several nodes by vLLM's own multiprocessing and
by Ray) must be one the installed vLLM takes; a flag our table says is gone
from a release on must be gone from its help. `.ci/run` installs the real
vLLM (the CPU build, `.venv-vllm`); `LLMGW_VLLM` names another `vllm`.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from engine_nodes import h100_cards, h100_node, request, two_h100_nodes
from real_vllm import VLLM, skip_without_real_vllm

from llmgw_core.engines import build_launch
from llmgw_core.engines.flags import FLAGS, READ_FROM, flag_name, release_key
from llmgw_core.engines.identity import EngineIdentity
from llmgw_core.engines.spec import LoraLaunch

_FLAG_LINE = re.compile(r"^  (-[-\w].*?)(?:\s{2,}|$)")
_CHOICES = re.compile(r"^--([\w-]+) \{([^}]*)\}")


@pytest.fixture(scope="module")
def vllm_help() -> tuple[str, dict[str, tuple[str, ...]]]:
    """The installed vLLM's version, and each flag of its help with the choices it lists."""
    skip_without_real_vllm()
    version = subprocess.run(
        # Its distribution's metadata: importing vllm to ask takes seconds of both cores.
        [
            str(VLLM.parent / "python"),
            "-c",
            "import importlib.metadata as m; print(m.version('vllm').split('+')[0])",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    done = subprocess.run(
        [str(VLLM), "serve", "--help=all"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return version.stdout.strip(), help_flags(done.stdout)


def help_flags(text: str) -> dict[str, tuple[str, ...]]:
    """`--flag` → its choices (empty where it lists none), aliases and `--no-` forms included."""
    flags: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        found = _FLAG_LINE.match(line)
        if found is None:
            continue
        for form in found.group(1).split(", "):
            choices = _CHOICES.match(form)
            name = form.split(" ")[0]
            if name.startswith("--"):
                flags[name] = tuple(choices.group(2).split(",")) if choices else ()
    return flags


def test_the_help_is_read_as_vllm_prints_it():
    text = (
        "  --kv-cache-dtype {auto,fp8}\n"
        "                        Data type for kv cache storage.\n"
        "  --enforce-eager, --no-enforce-eager\n"
        "  --gpu-memory-utilization GPU_MEMORY_UTILIZATION, --device-memory-utilization X\n"
        "  --nnodes NNODES, -n NNODES\n"
    )
    assert help_flags(text) == {
        "--kv-cache-dtype": ("auto", "fp8"),
        "--enforce-eager": (),
        "--no-enforce-eager": (),
        "--gpu-memory-utilization": (),
        "--device-memory-utilization": (),
        "--nnodes": (),
    }


def _launch_flags() -> set[str]:
    """Every `--flag` the launch writes on `vllm serve` across the layouts it builds."""
    one = h100_node(gpus=h100_cards(1))
    requests = [
        request(nodes=(one,)),
        request(),
        request(expert_parallel=True, quantization_flag="fp8", dtype_flag="half", concurrency=16),
        request(nodes=(one,), tls=EngineIdentity.make("help")),
        request(nodes=two_h100_nodes()),
        request(nodes=two_h100_nodes(engine_version="0.11.0")),  # Ray, before 0.12
        request(nodes=(one,), lora=LoraLaunch((("sql", "/a/sql"),), 2, 16, max_cpu_loras=4)),
    ]
    written = set()
    for asked in requests:
        for shard in build_launch(asked).shards:
            for command in shard.commands:
                if command.argv[1:2] == ("serve",):  # not Ray's own `ray start`
                    written |= {arg for arg in command.argv if arg.startswith("--")}
    return written


def test_every_flag_the_launch_writes_is_one_the_installed_vllm_takes(vllm_help):
    _version, flags = vllm_help
    written = _launch_flags()
    assert {"--tensor-parallel-size", "--nnodes", "--distributed-executor-backend"} <= written
    assert {"--enable-lora", "--lora-modules", "--max-loras", "--max-cpu-loras"} <= written
    assert sorted(written - set(flags)) == []


def test_every_flag_an_operator_may_pass_is_in_the_installed_vllm_with_its_choices(vllm_help):
    version, flags = vllm_help
    missing, choices_gone = [], []
    for name, flag in FLAGS["vllm"].items():
        if flag.until and release_key(version) >= release_key(flag.until):
            assert flag_name(name) not in flags, f"{name} is said gone from {flag.until} on"
            continue
        forms = [flag_name(name)] + (["--no-" + name.replace("_", "-")] if flag.default_on else [])
        missing += [form for form in forms if form not in flags]
        listed = flags.get(flag_name(name), ())
        if flag.choices and listed:
            choices_gone += [f"{name}={c}" for c in flag.choices if c not in listed]
    assert missing == [], f"vLLM {version} has no such flag"
    assert choices_gone == [], f"vLLM {version} takes none of these values"
    print(f"vLLM {version}: {len(flags)} flags; ours read from {READ_FROM['vllm']}")
