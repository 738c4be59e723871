"""Drive `llmgw-tui --demo` in a real terminal (tmux) and print what it shows.

    .venv/bin/python tests/tui/drive_demo_in_tmux.py

Starts the console on the embedded demo fleet in a 120×40 tmux session, waits
for every node to be ready, then presses `?`, `:racks`, Enter on a node,
walks `:serve` to a ready replica (model, way, context, env, the confirmation
page), opens its logs, stops it and presses `q`, capturing the screen after
each. Exit 0 when every screen showed what it
should and the console exited cleanly; 1 otherwise, with the last capture.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONSOLE = REPO / ".venv" / "bin" / "llmgw-tui"


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False).stdout


class Terminal:
    """One tmux session running a command, 120×40."""

    def __init__(self, command: str) -> None:
        self.name = f"llmgw-{uuid.uuid4().hex[:8]}"
        # `; sleep` keeps the pane open so the exit status can be read.
        _tmux(
            "new-session",
            "-d",
            "-s",
            self.name,
            "-x",
            "120",
            "-y",
            "40",
            f"{command}; echo EXIT=$?; sleep 60",
        )

    def screen(self) -> str:
        """What the terminal shows now."""
        return _tmux("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        """Press keys (tmux names: Enter, Escape, Down …)."""
        _tmux("send-keys", "-t", self.name, *keys)

    def wait_for(self, test: Callable[[str], bool], timeout_s: float) -> str:
        """The screen once `test` holds on it; raises TimeoutError with the last screen."""
        deadline = time.monotonic() + timeout_s
        while True:
            shown = self.screen()
            if test(shown):
                return shown
            if time.monotonic() > deadline:
                raise TimeoutError(shown)
            time.sleep(0.3)

    def close(self) -> None:
        """End the session (and anything still running in it)."""
        _tmux("kill-session", "-t", self.name)


def drive() -> dict[str, str]:
    """Run the walk; the captures by name. Raises TimeoutError when a screen never came."""
    # COLUMNS/LINES left by a test runner would override the pane's real size.
    terminal = Terminal(f"env -u COLUMNS -u LINES LLMGW_ANIMATION=none {CONSOLE} --demo")
    captures: dict[str, str] = {}
    try:
        captures["fleet"] = terminal.wait_for(lambda s: "23 nodes · 23 ready" in s, 180)
        terminal.keys("?")
        captures["help"] = terminal.wait_for(lambda s: "Keys of fleet" in s, 20)
        terminal.keys("Escape")
        terminal.wait_for(lambda s: "Keys of fleet" not in s, 20)
        terminal.keys(":")
        terminal.wait_for(lambda s: "command:" in s, 20)
        terminal.keys("racks", "Enter")
        captures["racks"] = terminal.wait_for(lambda s: "NOT JOINED" in s, 20)
        terminal.keys("1")
        terminal.wait_for(lambda s: "CARDS FREE/TOTAL" in s, 20)
        terminal.keys("Enter")
        captures["node"] = terminal.wait_for(lambda s: "NVLink matrix" in s, 20)
        terminal.keys("Escape")
        terminal.wait_for(lambda s: "CARDS FREE/TOTAL" in s, 20)
        serve_to_ready(terminal, captures)
        terminal.keys("q")
        captures["exit"] = terminal.wait_for(lambda s: "EXIT=" in s, 60)
    finally:
        terminal.close()
    return captures


SERVED = "llama-3-1-8b-instruct"


def serve_to_ready(terminal: Terminal, captures: dict[str, str]) -> None:
    """`:serve` a catalog model through every page, then its logs, then stop it."""
    terminal.keys(":")
    terminal.wait_for(lambda s: "command:" in s, 20)
    terminal.keys("serve", "Enter")
    captures["serve-model"] = terminal.wait_for(lambda s: "Which model?" in s, 20)
    terminal.keys("catalog:meta-llama/Llama-3.1-8B-Instruct", "Enter")
    captures["serve-ways"] = terminal.wait_for(lambda s: "ways for" in s, 60)
    terminal.keys("Enter")
    captures["serve-size"] = terminal.wait_for(lambda s: "GB a card (weights" in s, 60)
    terminal.keys("C-n")
    terminal.wait_for(lambda s: "Replica name." in s, 20)
    time.sleep(0.5)  # the page takes the focus at its first refresh
    terminal.keys("Tab")
    time.sleep(0.3)
    terminal.keys("NCCL_DEBUG=INFO")
    captures["serve-extras"] = terminal.wait_for(lambda s: "NCCL_DEBUG=INFO" in s, 20)
    terminal.keys("C-n")
    captures["serve-confirm"] = terminal.wait_for(lambda s: "serves it;" in s, 60)
    terminal.keys("C-n")
    captures["replicas"] = terminal.wait_for(
        lambda s: any(SERVED in line and " ready " in line for line in s.splitlines()), 180
    )
    terminal.keys("l")
    captures["logs"] = terminal.wait_for(lambda s: "[r0 " in s and " lines · " in s, 60)
    terminal.keys("Escape")
    terminal.wait_for(lambda s: "REPLICA" in s, 20)
    terminal.keys("s")
    terminal.wait_for(lambda s: "y stop" in s, 20)
    terminal.keys("y")
    captures["stopped"] = terminal.wait_for(lambda s: "0 replicas" in s, 60)
    terminal.keys("1")
    terminal.wait_for(lambda s: "CARDS FREE/TOTAL" in s, 20)


def main() -> int:
    """Print every capture; 0 when the console exited with 0."""
    if shutil.which("tmux") is None:
        print("tmux is not installed", file=sys.stderr)
        return 1
    try:
        captures = drive()
    except TimeoutError as stuck:
        print("the console never showed what was expected; last screen:\n" + str(stuck))
        return 1
    for name, shown in captures.items():
        print(f"===== {name} =====\n{shown.rstrip()}\n")
    return 0 if "EXIT=0" in captures["exit"] else 1


if __name__ == "__main__":
    sys.exit(main())
