"""A real `llmgw-tui --serve-web` on loopback, over an inventory of nodes that refuse connections.

The nodes' SSH ports are closed on purpose: the console lists them at once
(unreachable), which is all the browser tests need to see rows, move the
cursor and open a node's page, without starting an SSH server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

NODE_NAMES = ("alpha-node", "bravo-node", "charlie-node")


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class WebConsole:
    """The served console: its address and the server process."""

    url: str
    port: int
    process: subprocess.Popen[bytes]


@pytest.fixture
def web_console(tmp_path: Path) -> Iterator[WebConsole]:
    closed_ports = [free_port() for _ in NODE_NAMES]  # bound once, released: nothing listens
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(
        "nodes:\n"
        + "".join(
            f"  - {{name: {name}, host: 127.0.0.1, port: {port}}}\n"
            for name, port in zip(NODE_NAMES, closed_ports, strict=True)
        )
        + f"known_hosts: {tmp_path / 'known_hosts'}\n"
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env["HOME"] = str(tmp_path)
    env["LLMGW_ANIMATION"] = "none"
    process = subprocess.Popen(
        [sys.executable, "-m", "llmgw_tui.cli", "--serve-web", "--port", str(port),
         "--inventory", str(inventory)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its consoles (one per tab) are stopped with it
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            if process.poll() is not None:
                raise AssertionError(f"--serve-web exited: {process.stderr.read().decode()}")
            if time.monotonic() > deadline:
                raise AssertionError("--serve-web did not listen within 60 s")
            time.sleep(0.05)
        yield WebConsole(url=f"http://127.0.0.1:{port}", port=port, process=process)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        if process.stderr is not None:
            process.stderr.close()


def _listening(port: int) -> bool:
    with contextlib.closing(socket.socket()) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
