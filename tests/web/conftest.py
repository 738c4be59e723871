"""A real `llmgw-tui --serve-web`, over an inventory of nodes that refuse connections.

The nodes' SSH ports are closed on purpose: the console lists them at once
(unreachable), which is all the browser tests need to see rows, move the
cursor and open a node's page, without starting an SSH server.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from ports import free_port as free_port

NODE_NAMES = ("alpha-node", "bravo-node", "charlie-node")


@dataclass
class WebConsole:
    """The served console: its address, its token, the server process and what it printed."""

    url: str
    port: int
    token: str
    process: subprocess.Popen[bytes]
    printed: Path

    @property
    def origin(self) -> str:
        """The `Origin` its own page sends."""
        return self.url

    def authorized(self) -> dict[str, str]:
        """The header a script sends instead of the cookie."""
        return {"Authorization": f"token {self.token}"}

    def first_load(self) -> httpx.Response:
        """What a browser gets when it opens the printed address (the redirect is not followed)."""
        return httpx.get(f"{self.url}/?token={self.token}", timeout=30, follow_redirects=False)

    def cookie(self) -> str:
        """The `Cookie` header a browser sends once it opened the printed address."""
        name, value = next(iter(self.first_load().cookies.items()))
        return f"{name}={value}"

    def consoles(self) -> list[int]:
        """The console processes running under the server (one per open websocket)."""
        return descendants(self.process.pid)


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, read from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_line = (entry / "stat").read_text()
        except OSError:  # it ended while we looked
            continue
        parents[int(entry.name)] = int(stat_line.rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`llmgw-tui ARGS` run to its end (a refusal, here), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "llmgw_tui.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def fleet_inventory(tmp_path: Path) -> Path:
    """Three nodes whose SSH ports are closed (bound once, released: nothing listens)."""
    closed_ports = [free_port() for _ in NODE_NAMES]
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(
        "nodes:\n"
        + "".join(
            f"  - {{name: {name}, host: 127.0.0.1, port: {port}}}\n"
            for name, port in zip(NODE_NAMES, closed_ports, strict=True)
        )
        + f"known_hosts: {tmp_path / 'known_hosts'}\n"
    )
    return inventory


OPEN_LINE = re.compile(r"^open (?P<url>https?://\S+?)/\?token=(?P<token>\S+)", re.MULTILINE)


@contextlib.contextmanager
def serving(tmp_path: Path, *args: str, token: str | None = None) -> Iterator[WebConsole]:
    """`llmgw-tui --serve-web ARGS` over the closed fleet, until the block ends.

    It is ready when it prints the address to open (it prints it once it listens); the
    token is read from that address, or is `token` when ARGS hand it a `--token-file`.
    """
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env["HOME"] = str(tmp_path)
    env["LLMGW_ANIMATION"] = "none"
    printed = tmp_path / "printed.txt"
    with printed.open("wb") as stdout:
        process = subprocess.Popen(
            [sys.executable, "-m", "llmgw_tui.cli", "--serve-web",
             "--inventory", str(fleet_inventory(tmp_path)), *args],
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # its consoles (one per tab) are stopped with it
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (shown := OPEN_LINE.search(printed.read_text())):
            if process.poll() is not None:
                raise AssertionError(f"--serve-web exited: {process.stderr.read().decode()}")
            if time.monotonic() > deadline:
                raise AssertionError("--serve-web did not listen within 60 s")
            time.sleep(0.05)
        url = shown["url"]
        yield WebConsole(
            url=url,
            port=int(url.rsplit(":", 1)[1]),
            token=token if token is not None else shown["token"],
            process=process,
            printed=printed,
        )
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


@pytest.fixture
def web_console(tmp_path: Path) -> Iterator[WebConsole]:
    """A console on a free loopback port, with the token it made and printed."""
    with serving(tmp_path, "--port", str(free_port())) as console:
        yield console
