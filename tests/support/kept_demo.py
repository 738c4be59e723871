"""A demo fleet kept up for a test module (`llmgw-tui demo up`), and scripts run against it
from other processes, as an operator runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from ports import free_port as free_port

CLI = [sys.executable, "-m", "llmgw_tui.cli"]


def cli(
    *args: str, timeout: float = 180, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`llmgw-tui ARGS` in a process of its own (with `env` added to this one's environment)."""
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
        env=None if env is None else {**os.environ, **env},
    )


@contextmanager
def kept_demo(
    folder: Path, env: dict[str, str] | None = None, up_args: tuple[str, ...] = ()
) -> Iterator[str]:
    """A kept-up demo fleet in `folder` for the block; its inventory's path. Down afterwards.
    `env`: what the demo is started with (its simulated engines' `LLMGW_SIM_*` knobs);
    `up_args`: more of `demo up`'s arguments (`--engine vllm=PATH`)."""
    started = cli("demo", "up", "--dir", str(folder), *up_args, env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        cli("demo", "down", "--dir", str(folder))


def run_json(
    inventory: str, script: str, *, timeout: float = 300, env: dict[str, str] | None = None
) -> tuple[int, list[dict], str]:
    """A script (its text) against the inventory with `--json`: exit code, one dict per step,
    and what it said on stderr (`env`: more of the console's environment, a key it holds)."""
    done = cli(
        "--inventory", inventory, "--run", "-", "--json", stdin=script, timeout=timeout, env=env
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, lines, done.stderr


def start_json(
    inventory: str, script_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """A script run with `--json` in the background (its own process group), with `env` added
    to this one's environment."""
    return subprocess.Popen(
        [*CLI, "--inventory", inventory, "--run", str(script_path), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )


def processes_naming(folder: Path) -> list[int]:
    """Live processes whose command line or environment names `folder`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            seen = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if str(folder).encode() in seen:
            found.append(int(proc.name))
    return found


def apply_json(inventory: str, service: dict, **changed: object) -> dict:
    """`apply` the service document (with `changed` over it); its result. It must succeed."""
    script = yaml.safe_dump({"steps": [{"apply": {"service": {**service, **changed}}}]})
    code, steps, said = run_json(inventory, script)
    assert code == 0, (steps, said[-3000:])
    return steps[0]["result"]


def roll_under_load(
    inventory: str, folder: Path, service: dict, changed: dict, *, duration_s: float
) -> tuple[dict, dict]:
    """Apply `changed` while `bench` sends through the service's gateway from another process
    for `duration_s`: (apply's result, bench's result)."""
    script = folder / "bench.yaml"
    gateway = service["gateway"]
    name = gateway["name"] if isinstance(gateway, dict) else gateway
    bench_args = {"gateway": name, "duration_s": duration_s, "concurrency": 4}
    script.write_text(yaml.safe_dump({"steps": [{"bench": {**bench_args, "max_tokens": 16}}]}))
    bench = start_json(inventory, script)
    time.sleep(min(5.0, duration_s / 8))  # the benchmark is sending
    rolled = apply_json(inventory, service, **changed)
    out, err = bench.communicate(timeout=duration_s + 120)
    assert bench.returncode == 0, err[-3000:]
    return rolled, json.loads(out.splitlines()[-1])["result"]


async def operator(inventory: str) -> tuple[Any, Any, Any]:
    """An in-process console on the inventory: (fleet, its engine reach, its closer)."""
    from llmgw_core.fleet.session import open_fleet
    from llmgw_core.serve.http import EngineReach

    fleet, closer = await open_fleet(inventory=inventory, demo=False)
    return fleet, EngineReach(fleet), closer


async def close_operator(console: tuple[Any, Any, Any]) -> None:
    from llmgw_core.serve.http import close_quietly

    _, reach, closer = console
    await close_quietly(reach)
    await closer()


def service_request(doc: Any, folder: Path, inventory: str) -> tuple[Any, Any]:
    """The serve request and model one replica of the service document starts from."""
    from llmgw_core.script.context import StepContext
    from llmgw_core.script.steps.serve import serve_request

    ctx = StepContext(script_dir=folder, described_fleet=None, inventory=inventory, demo=False)
    return serve_request(doc, ctx, name=None)


def example_on_a_free_port(example: Path, folder: Path) -> Path:
    """A copy of an example script in `folder` whose gateway takes a free port, not 30000 (the
    demos of a parallel suite share this machine; an operator's port stays as written)."""
    copy = folder / example.name
    copy.write_text(example.read_text().replace("port: 30000", f"port: {free_port()}"))
    return copy


def chat_service(**given: Any) -> dict[str, Any]:
    """The `chat` service of the service tests: two replicas of an 8B model behind a gateway on a
    free port."""
    return {
        "name": "chat",
        "model": "catalog:meta-llama/Llama-3.1-8B-Instruct",
        "context": 8192,
        "gpu_class": "h100-80g",
        "replicas": 2,
        "gateway": {"name": "front", "port": free_port()},
        **given,
    }
