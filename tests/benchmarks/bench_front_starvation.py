"""Benchmark: can a client without a key starve the gateway's front? Before and after, one run.

Run (as root, to make the other user): `.venv/bin/python tests/benchmarks/bench_front_starvation.py`.
Prints figures; asserts nothing.

Two fronts, each a real process at an open-file limit of 1,024 (a common
default), each in front of a stand-in engine (a stdlib asyncio HTTP server in
this process, answering at once):

* `before`: the front of `BEFORE` (`git show`, run from a temporary copy,
  behind the stand-in as its router): it read a whole body before it checked
  the key, and had no time limits;
* `after`: today's front (`front/http.py`), default limits.

Three figures each:

1. the time to a 401 for a keyless POST announcing 10 MB and trickling it at
   about 1 MB/s;
2. the front's resident memory (VmRSS) at its peak while 16 keyless clients
   each upload 64 MiB at once;
3. how long a keyed chat completion takes beside 1,100 idle half-sent
   connections opened by ANOTHER Unix user (`useradd -M llmgw-bench-cotenant`,
   the opener run under `runuser`; removed at the end). All come from
   127.0.0.1, as the keyed client does, so a per-peer cap alone cannot help.
   Two openers: one that opens and holds, one that opens again at once each
   connection the front closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import resource
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "agent"
sys.path.insert(0, str(AGENT))

from llmgw_agent.front.control import call  # noqa: E402

BEFORE = "13e6c81"
"""The last commit whose front read a body before it checked the key."""
CLIENT_KEY = "sk-bench-client-0123456789"
ENGINE_KEY = "sk-bench-engine-9876543210"
MODEL = "bench-model"
OPEN_FILES = 1024
IDLE_CONNECTIONS = 1100
UPLOADS = 16
UPLOAD_BYTES = 64 * 1024 * 1024
TRICKLE_BYTES = 10_000_000
TRICKLE_PIECE = 64 * 1024
TRICKLE_PAUSE_S = 0.0625  # ~1 MB/s
GIVE_UP_S = 20.0
COTENANT = "llmgw-bench-cotenant"

OPENER = r"""
import selectors, socket, sys, time
port, count, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n"
selector = selectors.DefaultSelector()
def one():
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(HEAD)
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ)
        return 1
    except OSError:
        return 0
opened = sum(one() for _ in range(count))
print(opened, flush=True)
reopened = 0
while True:
    if mode != "reopen":
        time.sleep(3600)
    for key, _ in selector.select(1.0):
        try:
            gone = key.fileobj.recv(65536) == b""
        except OSError:
            gone = True
        if gone:
            selector.unregister(key.fileobj)
            key.fileobj.close()
            reopened += one()
"""


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class StandIn:
    """The engine (and, for `before`, the router): asyncio in a thread, answering at once."""

    def __init__(self) -> None:
        self.port = _port()
        self._ready = threading.Event()
        threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True).start()
        self._ready.wait(10)

    async def _main(self) -> None:
        server = await asyncio.start_server(self._client, "127.0.0.1", self.port)
        self._ready.set()
        async with server:
            await server.serve_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if length:
                    await reader.readexactly(length)
                path = head.split(b" ")[1]
                if path == b"/workers":
                    url = f"http://127.0.0.1:{self.port}"
                    body = json.dumps({"workers": [{"url": url, "model_id": MODEL}]}).encode()
                else:
                    body = b'{"choices": [{"message": {"content": "hi"}}]}'
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
                if b"connection: close" in head.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _old_front(root: Path) -> Path:
    text = subprocess.run(
        ["git", "show", f"{BEFORE}:agent/llmgw_agent/front/server.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = root / "old_front.py"
    path.write_text(text + "\n\nif __name__ == '__main__':\n    sys.exit(main(sys.argv[1:]))\n")
    return path


def _at_open_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


@contextlib.contextmanager
def front(which: str, stand_in: StandIn) -> Iterator[tuple[int, int]]:
    """The `before` or `after` front at `OPEN_FILES`: (its port, its pid)."""
    with tempfile.TemporaryDirectory(prefix="bench-starve-") as root:
        config = {
            "keys": [{"id": "bench", "key": CLIENT_KEY, "models": None}],
            "upstream": {MODEL: ENGINE_KEY},
        }
        env = {
            **os.environ,
            "PYTHONPATH": str(AGENT),
            "LLMGW_AGENT_STATE": str(Path(root) / "state"),
            "LLMGW_FRONT_CONFIG": json.dumps(config),
        }
        port = _port()
        control = Path(root) / "control"
        control.mkdir(mode=0o700)
        if which == "before":
            argv = [
                *(sys.executable, "-S", str(_old_front(Path(root)))),
                *("--listen", f"127.0.0.1:{port}", "--router", f"127.0.0.1:{stand_in.port}"),
                *("--metrics", f"127.0.0.1:{_port()}"),
            ]
        else:
            argv = [
                *(sys.executable, "-S", "-m", "llmgw_agent", "front"),
                *("--listen", f"127.0.0.1:{port}", "--control", str(control / "front.sock")),
            ]
        process = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            preexec_fn=_at_open_file_limit,
        )
        try:
            assert process.stdout is not None
            process.stdout.readline()
            if which == "after":
                worker = {"url": f"http://127.0.0.1:{stand_in.port}", "model_id": MODEL}
                call(str(control / "front.sock"), "POST", "/workers", worker)
            threading.Thread(target=process.stdout.read, daemon=True).start()
            yield port, process.pid
        finally:
            process.terminate()
            process.wait(10)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def time_to_401(port: int) -> float | None:
    """Seconds from a keyless head (announcing `TRICKLE_BYTES`) to its 401; None: none came."""
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
        f"Content-Length: {TRICKLE_BYTES}\r\n\r\n"
    ).encode()
    piece = b"x" * TRICKLE_PIECE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        started = time.monotonic()
        connection.sendall(head)
        connection.setblocking(False)
        sent = 0
        while time.monotonic() - started < GIVE_UP_S:
            if select.select([connection], [], [], TRICKLE_PAUSE_S)[0]:
                if connection.recv(65536).startswith(b"HTTP/1.1 401"):
                    return time.monotonic() - started
                return None
            if sent < TRICKLE_BYTES:
                with contextlib.suppress(BlockingIOError, BrokenPipeError, ConnectionResetError):
                    sent += connection.send(piece[: TRICKLE_BYTES - sent])
    return None


def peak_rss_during_uploads(port: int, pid: int) -> tuple[float, float, int]:
    """(RSS before, peak RSS during `UPLOADS` keyless uploads of `UPLOAD_BYTES`, 401s seen)."""
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
        f"Content-Length: {UPLOAD_BYTES}\r\n\r\n"
    ).encode()
    body = b"x" * UPLOAD_BYTES
    answered = []

    def upload() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
            with contextlib.suppress(OSError):
                connection.sendall(head + body)
            with contextlib.suppress(OSError):
                if connection.recv(64).startswith(b"HTTP/1.1 401"):
                    answered.append(1)

    before = _rss_mib(pid)
    threads = [threading.Thread(target=upload) for _ in range(UPLOADS)]
    for thread in threads:
        thread.start()
    peak = before
    while any(thread.is_alive() for thread in threads):
        peak = max(peak, _rss_mib(pid))
        time.sleep(0.01)
    return before, peak, len(answered)


def keyed_seconds(port: int, samples: int = 10) -> list[float | str]:
    """Seconds each of `samples` keyed chat completions took, or why it got no answer."""
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    raw = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {CLIENT_KEY}\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n{body}"
    ).encode()
    taken: list[float | str] = []
    for _ in range(samples):
        started = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=GIVE_UP_S) as connection:
                connection.sendall(raw)
                answer = connection.recv(65536)
        except OSError as exc:
            taken.append(f"{type(exc).__name__} after {time.monotonic() - started:.1f} s")
            continue
        ok = answer.startswith(b"HTTP/1.1 200")
        taken.append(time.monotonic() - started if ok else repr(answer[:20]))
    return taken


@contextlib.contextmanager
def cotenant() -> Iterator[list[str] | None]:
    """A second Unix user for the opener: the command prefix to run as it (None: same user)."""
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("runuser") is None:
        yield None
        return
    made = subprocess.run(["useradd", "-M", "-s", "/bin/sh", COTENANT], capture_output=True)
    try:
        pwd.getpwnam(COTENANT)
    except KeyError:
        print(f"  (useradd failed: {made.stderr.decode().strip()}; the opener runs as root)")
        yield None
        return
    try:
        yield ["runuser", "-u", COTENANT, "--"]
    finally:
        subprocess.run(["userdel", COTENANT], capture_output=True)


@contextlib.contextmanager
def idle_connections(port: int, as_user: list[str] | None, mode: str) -> Iterator[int]:
    """`IDLE_CONNECTIONS` half-sent connections held by the opener: how many it opened."""
    with tempfile.TemporaryDirectory(prefix="bench-opener-") as folder:
        os.chmod(folder, 0o755)
        script = Path(folder) / "opener.py"
        script.write_text(OPENER)
        script.chmod(0o644)
        python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
        command = f"ulimit -n 4096 && exec {python} {script} {port} {IDLE_CONNECTIONS} {mode}"
        process = subprocess.Popen(
            [*(as_user or []), "bash", "-c", command],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            assert process.stdout is not None
            opened = int(process.stdout.readline() or 0)
            time.sleep(0.5)
            yield opened
        finally:
            os.killpg(process.pid, 15)
            process.wait(10)


def _seconds(value: float | None) -> str:
    return f"{value * 1000:.1f} ms" if value is not None else f"no answer in {GIVE_UP_S:.0f} s"


def _summary(taken: list[float | str]) -> str:
    answered = [t for t in taken if isinstance(t, float)]
    failed = sorted({t for t in taken if isinstance(t, str)})
    why = f"; not answered: {', '.join(failed)}" if failed else ""
    if not answered:
        return f"no answer ({len(taken)} tries{why})"
    return (
        f"median {statistics.median(answered) * 1000:.1f} ms, max {max(answered) * 1000:.1f} ms"
        f" ({len(answered)}/{len(taken)} answered{why})"
    )


def main() -> None:
    stand_in = StandIn()
    print(
        f"front at an open-file limit of {OPEN_FILES}; {os.cpu_count()} CPUs; "
        f"stand-in engine on 127.0.0.1:{stand_in.port}"
    )
    with cotenant() as as_user:
        who = f"user {COTENANT} (runuser)" if as_user else "the same user (no useradd here)"
        for which in ("before", "after"):
            print(f"\n{which}:")
            with front(which, stand_in) as (port, pid):
                print(f"  keyed request, nothing else:            {_summary(keyed_seconds(port))}")
                print(f"  401 to a keyless 10 MB at ~1 MB/s:      {_seconds(time_to_401(port))}")
            with front(which, stand_in) as (port, pid):
                idle_mib, peak_mib, answered = peak_rss_during_uploads(port, pid)
                print(
                    f"  RSS, {UPLOADS} x 64 MiB keyless uploads:    {idle_mib:.0f} MiB idle, "
                    f"{peak_mib:.0f} MiB peak ({answered}/{UPLOADS} clients read their 401)"
                )
            for mode in ("hold", "reopen"):
                with front(which, stand_in) as (port, pid):
                    with idle_connections(port, as_user, mode) as opened:
                        taken = keyed_seconds(port, 2 if which == "before" else 10)
                        fds = len(os.listdir(f"/proc/{pid}/fd"))
                    print(
                        f"  keyed beside {opened} idle ({mode}, {who}): {_summary(taken)}; "
                        f"the front held {fds} descriptors"
                    )


if __name__ == "__main__":
    main()
