"""The console in a browser: `llmgw-tui --serve-web` hands each page its own console over textual-serve.

textual-serve (a small aiohttp server kept by the Textual authors) starts one
console process per browser tab and relays its screen and keys over a
websocket. It has no login of its own, and the console it serves holds SSH
access to every node of the fleet, so it listens on the loopback address
unless the person starting it says otherwise, and is warned when they do.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import sys
from dataclasses import dataclass

from llmgw_core.errors import BadInput

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000

REMOTE_WARNING = (
    "warning: the console served on {host}:{port} holds SSH access to every node of the fleet, "
    "and textual-serve asks for no password: anyone who can reach that address can run it"
)


@dataclass(frozen=True)
class WebSettings:
    """Where the browser console listens and what each tab runs."""

    host: str
    port: int
    console_argv: tuple[str, ...]
    public_url: str | None = None

    @property
    def command(self) -> str:
        """The shell line textual-serve runs for each tab, every part quoted."""
        return shlex.join(self.console_argv)


def is_loopback(host: str) -> bool:
    """True when `host` is reachable only from this machine (`localhost`, 127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def web_settings(
    *,
    host: str,
    port: int,
    allow_remote: bool,
    inventory: str | None,
    demo: bool,
    public_url: str | None = None,
) -> WebSettings:
    """Check where to listen and build the console line each tab runs.

    Raises:
        BadInput: a port out of range, or a non-loopback host without `allow_remote`.
    """
    if not 1 <= port <= 65535:
        raise BadInput(f"--port {port} is not a TCP port", "give one between 1 and 65535")
    if not host.strip():
        raise BadInput("--host is empty", f"leave it out to listen on {DEFAULT_HOST}")
    if not is_loopback(host) and not allow_remote:
        raise BadInput(
            f"--host {host} would let other machines reach a console that holds SSH access to the fleet",
            "add --allow-remote if that is what you want, or leave --host out",
        )
    argv = [sys.executable, "-m", "llmgw_tui.cli"]
    if inventory:
        from pathlib import Path

        argv += ["--inventory", str(Path(inventory).expanduser().resolve())]
    if demo:
        argv.append("--demo")
    return WebSettings(host=host, port=port, console_argv=tuple(argv), public_url=public_url)


def serve_web(settings: WebSettings) -> int:
    """Serve the console until interrupted; the exit code."""
    from textual_serve.server import Server

    if not is_loopback(settings.host):
        print(REMOTE_WARNING.format(host=settings.host, port=settings.port), file=sys.stderr)
    server = Server(
        settings.command,
        host=settings.host,
        port=settings.port,
        title="llmgw",
        public_url=settings.public_url,
    )
    try:
        server.serve()
    except OSError as exc:  # the port is taken, or the address is not this machine's
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise BadInput(
            f"cannot listen on {settings.host}:{settings.port}: {reason}",
            "choose another --port or --host",
        ) from None
    return 0
