"""The small process that owns one detached shard: `llmgw supervise <shard dir>`.

Started by the agent in its own session (setsid, stdio away from the SSH
channel), it runs the shard's commands in order — sidecars, each waited for
on its port when asked, then the main one — each in its own process group;
pumps their output into the capped log; records phase, pids, start ticks,
health and exit in `state.json`; and on SIGTERM stops them all (SIGTERM to
each group, SIGKILL after the stop timeout) and frees the shard's claims.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import threading
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path
from typing import List, Optional, Tuple

from llmgw_agent import paths, proc_identity
from llmgw_agent.logcap import CappedLog, LineSplitter
from llmgw_agent.shards import claims, memfiles
from llmgw_agent.shards.records import read_record, terminate_groups, write_record

_WATCH_POLL_S = 0.1
_HEALTH_POLL_S = 1.0
_PUMP_JOIN_S = 2.0

Outcome = Tuple[str, str, Optional[int]]
"""(phase, reason, exit code) a shard ends with."""


class Supervisor:
    """Runs one shard's commands and keeps its `state.json` true."""

    def __init__(self, directory: Path, token: str) -> None:
        self.directory = directory
        self.shard = read_record(directory / "shard.json")
        if self.shard.get("token") != token:
            raise SystemExit("llmgw supervise: the token does not match {}".format(directory))
        self.token = token
        self.state = read_record(directory / "state.json") or {"phase": "starting"}
        self.state.setdefault("commands", [])
        self.stop_requested = threading.Event()
        self.log = CappedLog(directory, int(self.shard.get("log_max_bytes", 16 * 1024 * 1024)))
        self.processes: List[subprocess.Popen] = []
        self.pumps: List[threading.Thread] = []
        self._state_lock = threading.Lock()
        self._done = threading.Event()
        self.unwritten: Optional[str] = None
        """Why the last `state.json` write failed (None: it is on disk)."""

    # --- recording --------------------------------------------------------

    def note(self, text: str) -> None:
        """A line of our own in the shard's log, marked as the agent's."""
        self.log.write_line(("[llmgw] " + text).encode())

    def update(self, **changes) -> None:
        """Change `state.json` (atomically, one writer thread at a time).

        A full disk does not stop the shard: the change is kept and written
        with the next one that fits.
        """
        with self._state_lock:
            self.state.update(changes)
            self._write_state()

    def _write_state(self) -> None:
        try:
            write_record(self.directory / "state.json", self.state)
        except OSError as exc:
            self.unwritten = str(exc.strerror or exc)
        else:
            self.unwritten = None

    # --- starting ---------------------------------------------------------

    def _environment(self, command: dict) -> dict:
        env = dict(os.environ)
        env.update(command.get("env") or {})
        env[proc_identity.TOKEN_ENV] = self.token
        env["LLMGW_SHARD_ID"] = self.shard["shard_id"]
        env["LLMGW_SHARD_GPUS"] = ",".join(self.shard.get("gpus", []))
        return env

    def _spawn(self, command: dict) -> subprocess.Popen:
        # The engine's TLS key and certificate: in-memory files it inherits (memfiles).
        held = memfiles.hold(command.get("run_argv") or command["argv"], self._environment(command))
        try:
            process = subprocess.Popen(
                held.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=command.get("cwd") or None,
                env=held.env,
                close_fds=True,
                pass_fds=held.fds,
                start_new_session=True,
            )
        finally:
            held.close()
        prefix = b"" if command["role"] == "main" else "[{}] ".format(command["name"]).encode()
        pump = threading.Thread(target=self._pump, args=(process, prefix), daemon=True)
        pump.start()
        self.pumps.append(pump)
        return process

    def _pump(self, process: subprocess.Popen, prefix: bytes) -> None:
        splitter = LineSplitter(self.log.write_line, prefix)
        fd = process.stdout.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            splitter.feed(chunk)
        splitter.close()
        process.stdout.close()

    def _wait_for_port(self, command: dict, process: subprocess.Popen) -> Optional[Outcome]:
        port = command["wait_for_port"]
        deadline = time.monotonic() + float(command.get("port_timeout_s", 600.0))
        while not _port_accepts(port):
            if self.stop_requested.wait(0.1):
                return ("stopped", "stopped on request while starting", None)
            code = process.poll()
            if code is not None:
                reason = "{} exited with code {} before port {} accepted".format(
                    command["name"], code, port
                )
                return ("failed", reason, code)
            if time.monotonic() > deadline:
                reason = "port {} of {} did not accept within {:.0f} s".format(
                    port, command["name"], command.get("port_timeout_s", 600.0)
                )
                return ("failed", reason, None)
        return None

    def launch(self) -> Optional[Outcome]:
        """Start the commands in order; an outcome when the shard ended while starting."""
        for command in self.shard["commands"]:
            if self.stop_requested.is_set():
                return ("stopped", "stopped on request while starting", None)
            try:
                process = self._spawn(command)
            except OSError as exc:
                reason = "could not start {} ({}): {}".format(
                    command["name"], (command.get("run_argv") or command["argv"])[0], exc
                )
                self.note(reason)
                return ("failed", reason, None)
            self.processes.append(process)
            record = proc_identity.identity(process.pid)
            record.update(name=command["name"], role=command["role"], exit_code=None)
            self.update(commands=[*self.state["commands"], record])
            self.note("started {} (pid {})".format(command["name"], process.pid))
            if command.get("wait_for_port"):
                outcome = self._wait_for_port(command, process)
                if outcome is not None:
                    return outcome
        self.update(phase="running", running_at=time.time())
        return None

    # --- running ----------------------------------------------------------

    def watch(self) -> Outcome:
        """Wait until a command ends or a stop is asked for; what the shard ends as."""
        commands = self.shard["commands"]
        while not self.stop_requested.wait(_WATCH_POLL_S):
            for index, process in enumerate(self.processes):
                command = commands[index]
                code = process.poll()
                if code is None:
                    continue
                self._record_exit(process, code)
                if command["role"] == "main":
                    if code == 0:
                        return ("exited", "the engine exited", 0)
                    return ("failed", "the engine exited with code {}".format(code), code)
                return ("failed", "{} exited with code {}".format(command["name"], code), code)
        return ("stopped", "stopped on request", None)

    def _record_exit(self, process: subprocess.Popen, code: int) -> None:
        with self._state_lock:
            for record in self.state["commands"]:
                if record["pid"] == process.pid:
                    record["exit_code"] = code
            self._write_state()

    def probe_health(self) -> None:
        """Poll the health URL while running; record `healthy` when it changes."""
        url = self.shard.get("health_url")
        if not url:
            return
        # HTTPS is pinned to the engine's own certificate: a process that took the port of
        # a dead engine cannot answer healthy.
        context = _pinned_context(self.shard.get("health_cert"))
        while not self._done.wait(_HEALTH_POLL_S):
            if self.state.get("phase") != "running":
                continue
            status = _http_status(url, context)
            healthy = status == 200
            if healthy != self.state.get("healthy") or status != self.state.get("health_status"):
                changes = {"healthy": healthy, "health_status": status}
                if healthy and not self.state.get("served_at"):
                    # Sticky: a replica that served once is worth healing even if its
                    # health fell (a peer lost) before the console stopped it.
                    changes["served_at"] = time.time()
                self.update(health_checked_at=time.time(), **changes)

    # --- stopping ---------------------------------------------------------

    def stop_all(self) -> bool:
        """Stop every command still running, newest first; whether SIGKILL was needed."""
        timeout_s = float(
            read_record(self.directory / "stop.json").get(
                "timeout_s", self.shard.get("stop_timeout_s", 30.0)
            )
        )
        by_pid = {process.pid: process for process in self.processes}
        killed = terminate_groups(
            sorted(by_pid, key=lambda pid: -self.processes.index(by_pid[pid])),
            lambda pid: by_pid[pid].poll() is None,
            timeout_s,
        )
        for process in self.processes:
            self._record_exit(process, process.wait())
        for pump in self.pumps:
            pump.join(_PUMP_JOIN_S)
        return killed

    def run(self) -> int:
        """Run the shard to its end; always record the end and free the claims."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda _signum, _frame: self.stop_requested.set())
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        write_record(self.directory / "supervisor.json", proc_identity.identity(os.getpid()))
        health = threading.Thread(target=self.probe_health, daemon=True)
        health.start()
        try:
            outcome = self.launch() or self.watch()
        except Exception as exc:  # the supervisor's edge: record it, stop the rest
            traceback.print_exc()
            outcome = ("failed", "the supervisor failed: {}".format(exc), None)
        killed = self.stop_all()
        self._done.set()
        phase, reason, code = outcome
        if self.stop_requested.is_set() and phase != "failed":
            phase, reason = "stopped", "stopped on request"
        if killed:
            reason += " (SIGKILL after the stop timeout)"
        self.note("shard {}: {}".format(phase, reason))
        self.log.close()
        # Claims go first: whoever sees the terminal phase may reuse the cards at once.
        claims.release(self.shard.get("gpus", []), self.shard["shard_id"])
        self.update(phase=phase, reason=reason, exit_code=code, killed=killed, ended_at=time.time())
        return 0


def _port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _pinned_context(cert_pem: Optional[str]):  # -> Optional[ssl.SSLContext]
    """A client context trusting `cert_pem` alone (no name checked: the pin is the
    certificate), None without one; `llmgw_core.engines.identity.pinned_context`'s rule."""
    if not cert_pem:
        return None
    import ssl

    context = ssl.create_default_context(cadata=cert_pem)
    context.check_hostname = False
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _http_status(url: str, context=None) -> Optional[int]:
    try:
        with urllib.request.urlopen(url, timeout=2.0, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def supervise_main(argv) -> int:
    """`llmgw supervise SHARD_DIR` (internal: started by the agent, the shard's token in
    `LLMGW_SHARD_TOKEN`).

    The token comes in the environment, not as an argument: a command line is
    every user's to read (`ps`), `/proc/<pid>/environ` this user's alone. It
    is taken out of `os.environ` at once, so nothing started here inherits it
    unasked (each command is given it on purpose, `_environment`); the kernel
    keeps the environment the process was started with, which is what
    `proc_identity.carries_token` reads to know this supervisor is the shard's.
    """
    parser = argparse.ArgumentParser(prog="llmgw supervise")
    parser.add_argument("directory")
    options = parser.parse_args(argv)
    token = os.environ.pop(proc_identity.TOKEN_ENV, "")
    if not token:
        raise SystemExit("llmgw supervise: no shard token in {}".format(proc_identity.TOKEN_ENV))
    paths.state_dir()
    return Supervisor(Path(options.directory), token).run()
