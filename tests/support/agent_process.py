"""A real agent subprocess speaking its protocol, for the agent tests to talk to.

Kept out of `conftest.py` under a name of its own: test modules import it,
and several test folders have a `conftest` of their own.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

AGENT_ROOT = Path(__file__).resolve().parents[2] / "agent"
PYTHON = sys.executable


def agent_env(state_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of an agent that sees only `agent/` and the given state dir."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LLMGW_")}
    env.pop("PYTHONPATH", None)
    env["PYTHONPATH"] = str(AGENT_ROOT)
    env["LLMGW_AGENT_STATE"] = str(state_dir)
    env.update(extra)
    return env


def agent_argv(*args: str) -> list[str]:
    """`python -S -m llmgw_agent ...`: no site-packages, only `agent/` on the path."""
    return [PYTHON, "-S", "-m", "llmgw_agent", *args]


@contextlib.contextmanager
def front_process(folder: Path, config: dict, *more: str) -> Iterator[tuple[int, str]]:
    """`llmgw front` as a real process on a free loopback port, given `config` (the
    `LLMGW_FRONT_CONFIG` JSON), its control socket in a 0700 folder under `folder` and its
    state in another: `(port, control socket)` once it says it listens; ended after."""
    import socket

    private = folder / "private"
    private.mkdir(mode=0o700)
    control = str(private / "front.sock")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        agent_argv("front", "--listen", f"127.0.0.1:{port}", "--control", control, *more),
        env=agent_env(folder / "state", LLMGW_FRONT_CONFIG=json.dumps(config)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    assert process.stdout.readline().startswith(b"llmgw front on 127.0.0.1:")
    try:
        yield port, control
    finally:
        process.terminate()
        process.wait(10)


class AgentClient:
    """The console's side of one `serve` channel, over a real subprocess."""

    def __init__(
        self,
        env: dict[str, str],
        *args: str,
        stderr_path: Path | None = None,
        command: list[str] | None = None,
    ) -> None:
        self._stderr = open(stderr_path or os.devnull, "ab")  # noqa: SIM115 closed in close()
        self.proc = subprocess.Popen(
            command or agent_argv("serve", *args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._queues: dict[object, queue.Queue] = {}
        self.unaddressed: queue.Queue = queue.Queue()
        self._hello: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.hello = self._hello.get(timeout=20)["hello"]

    def _queue(self, request_id: object) -> queue.Queue:
        with self._lock:
            return self._queues.setdefault(request_id, queue.Queue())

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            message = json.loads(raw)
            if "hello" in message:
                self._hello.put(message)
            elif message.get("id") is None:
                self.unaddressed.put(message)
            else:
                self._queue(message["id"]).put(message)

    def send_line(self, line: bytes) -> None:
        """Write raw bytes (a newline is added) to the agent's stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def send(self, op: str, args: dict | None = None, request_id: object = None) -> object:
        """Send one request; return its id."""
        request_id = next(self._ids) if request_id is None else request_id
        self._queue(request_id)
        self.send_line(json.dumps({"id": request_id, "op": op, "args": args or {}}).encode())
        return request_id

    def next_message(self, request_id: object, timeout_s: float = 20.0) -> dict:
        """The next line addressed to `request_id` (an event or the final answer)."""
        return self._queue(request_id).get(timeout=timeout_s)

    def answer(self, request_id: object, timeout_s: float = 20.0) -> dict:
        """The final answer to `request_id`, skipping its events."""
        deadline = time.monotonic() + timeout_s
        while True:
            message = self.next_message(request_id, max(0.01, deadline - time.monotonic()))
            if "event" not in message:
                return message

    def request(self, op: str, args: dict | None = None, timeout_s: float = 20.0) -> dict:
        """Send a request and wait for its final answer."""
        return self.answer(self.send(op, args), timeout_s)

    def call(self, op: str, args: dict | None = None, timeout_s: float = 20.0) -> object:
        """A request that must succeed; its result."""
        reply = self.request(op, args, timeout_s)
        assert reply["ok"], reply
        return reply["result"]

    def close(self) -> int:
        """Close stdin (the channel ends) and wait for the agent to exit."""
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._stderr.close()
        return code

    def kill(self) -> None:
        """SIGKILL the agent (a dropped SSH session that takes the agent with it)."""
        self.proc.kill()
        self.proc.wait()
        self._stderr.close()


def processes_with_state(state_dir: Path) -> list[int]:
    """Pids of live processes whose environment names this state dir."""
    marker = ("LLMGW_AGENT_STATE=" + str(state_dir)).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in environ and state != "Z":
            found.append(int(entry.name))
    return found
