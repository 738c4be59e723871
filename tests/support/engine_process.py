"""An engine run as a process of its own on 127.0.0.1, for tests that talk to it over HTTP, and
the tool a client's tool-call request names.

`serving` starts it on a free port (`--port N` appended to its argv), waits for
its readiness route to answer 200, yields its base URL, and stops it after.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from ports import free_port

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
"""The function tool the tool-call tests offer a model."""


AGENT_DIR = Path(__file__).resolve().parents[2] / "agent"
SIM_VLLM = [sys.executable, "-S", "-m", "llmgw_agent", "sim-engine", "--", "vllm", "serve"]
"""The sim engine standing in for `vllm serve`, started alone (its model and flags follow)."""


def sim_env(state: Path, **more: str) -> dict[str, str]:
    """The environment of a sim engine started alone: this one's, less ours and vLLM's, the
    agent on the path, its state in `state`, no loading time; `more` on top."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("LLMGW_", "VLLM_"))}
    return {
        **kept,
        "PYTHONPATH": str(AGENT_DIR),
        "LLMGW_AGENT_STATE": str(state),
        "LLMGW_SIM_LOAD_S": "0",
        **more,
    }


def loopback_port() -> int:
    """A port nothing listens on at 127.0.0.1 now (`ports.free_port`)."""
    return free_port()


def end_process(process: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM, then SIGKILL if it has not ended within `grace_s`; reaped either way."""
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@contextlib.contextmanager
def serving(
    argv: list[str], env: dict[str, str], *, ready: str, wait_s: float, log: Path | None = None
) -> Iterator[str]:
    """The engine `argv` running with `--port N` until the block ends; its base URL.

    Its output goes to `log` (shown when it exits at start), else nowhere.
    """
    port = loopback_port()
    with contextlib.ExitStack() as files:
        out = files.enter_context(log.open("wb")) if log else subprocess.DEVNULL
        process = subprocess.Popen(
            [*argv, "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + wait_s
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + ready, timeout=5).status_code == 200:
                    break
            if process.poll() is not None:
                said = log.read_text(errors="replace")[-3000:] if log else ""
                raise AssertionError(f"the engine exited at start\n{said}")
            assert time.monotonic() < deadline, f"the engine never answered {ready}"
            time.sleep(0.2)
        yield base
    finally:
        end_process(process, 30)
