"""Run the bad-input corpus the way a user meets each input, and print its figures.

    python tests/badinput/corpus.py            # every case; the figures, then each failure

Script, inventory, model and injection cases run `llmgw-tui --run` in this
process (its `main`, stdout and stderr captured, a timer against hangs), and
the first of each category and every `SUBPROCESS_EVERY`-th one again as a real
`llmgw-tui` process (each costs a second or more of start-up). Protocol
lines go to one real agent process over its stdin. Captures are replayed by
the real `llmgw doctor --replay DIR --facts --json`. Shell cases run the
command line the core builds under a real `/bin/sh`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generate import SECRET, Case, cases, materialise

CASE_TIMEOUT_S = 20.0
TIMES: dict[str, float] = {}
SUBPROCESS_EVERY = 250
REPO = Path(__file__).resolve().parents[2]

ENV = {
    "HF_TOKEN": SECRET,
    "VLLM_API_KEY": SECRET,
    "LLMGW_API_KEY": SECRET,
    "HF_HUB_OFFLINE": "1",
    "HF_ENDPOINT": "http://127.0.0.1:9",
    "NO_COLOR": "1",
}


@dataclass(frozen=True)
class Result:
    """What one case did."""

    case: Case
    got: int | str | None
    output: str
    traceback: bool = False
    hang: bool = False
    leak: bool = False
    died: bool = False
    note: str = ""

    @property
    def lines(self) -> list[str]:
        return [line for line in self.output.splitlines() if line.strip()]

    @property
    def clean(self) -> bool:
        """The expected end, the fragment in one sentence, no traceback, hang, leak or death."""
        if self.traceback or self.hang or self.leak or self.died or self.note:
            return False
        if self.got != self.case.expect:
            return False
        if self.case.unsaid and self.case.unsaid in self.output:
            return False
        if self.case.kind == "run" and self.case.as_json:
            return len(self.lines) == 1 and _json_refusal(self.lines[0], self.case.fragment)
        if self.case.kind == "run":
            return len(self.lines) == 1 and self.case.fragment in self.lines[0]
        return self.case.fragment in self.output

    def why(self) -> str:
        """One line saying how the case went wrong."""
        parts = [f"{self.case.id}: expected {self.case.expect!r} with {self.case.fragment!r}"]
        parts.append(f"got {self.got!r}")
        for flag in ("traceback", "hang", "leak", "died"):
            if getattr(self, flag):
                parts.append(flag.upper())
        if self.note:
            parts.append(self.note)
        parts.append(repr(self.output[-300:]))
        return "; ".join(parts)


def _json_refusal(line: str, fragment: str) -> bool:
    """True for `--json`'s one object saying the input was refused, with the fragment."""
    try:
        message = json.loads(line)
    except ValueError:
        return False
    return (
        isinstance(message, dict)
        and message.get("ok") is False
        and fragment in str(message.get("error"))
    )


class _Hung(BaseException):
    """Raised by the timer inside a case that ran past CASE_TIMEOUT_S."""


def _alarm(_signum: int, _frame: Any) -> None:
    raise _Hung


def _has_secret(text: str) -> bool:
    return SECRET in text


def _run_argv(case: Case, folder: Path) -> list[str]:
    argv = ["--run", str(folder / "script.yaml")]
    if case.inventory:
        argv += ["--inventory", str(folder / "inventory.yaml")]
    if case.as_json:
        argv.append("--json")
    return argv


def run_in_process(case: Case, folder: Path) -> Result:
    """`llmgw-tui --run …` through its `main`, with a timer against hangs."""
    from llmgw_tui.cli import main

    out, err = io.StringIO(), io.StringIO()
    got: int | None = None
    broke = hang = False
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                got = main(_run_argv(case, folder))
            except SystemExit as exc:
                got = exc.code if isinstance(exc.code, int) else 2
            except _Hung:
                hang = True
            except Exception:  # what the product let escape: a traceback a user would see
                import traceback

                traceback.print_exc()
                broke = True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    text = out.getvalue() + err.getvalue()
    return Result(
        case,
        got,
        text,
        traceback=broke or "Traceback" in text,
        hang=hang,
        leak=_has_secret(text),
    )


def _environment() -> dict[str, str]:
    return {**os.environ, **ENV, "PYTHONPATH": str(REPO / "agent")}


def run_subprocess(case: Case, folder: Path) -> Result:
    """`llmgw-tui --run …` as a real process."""
    argv = [sys.executable, "-m", "llmgw_tui.cli", *_run_argv(case, folder)]
    try:
        done = subprocess.run(
            argv, capture_output=True, env=_environment(), timeout=CASE_TIMEOUT_S, cwd=folder
        )
    except subprocess.TimeoutExpired:
        return Result(case, None, "", hang=True)
    text = (done.stdout + done.stderr).decode(errors="replace")
    return Result(
        case, done.returncode, text, traceback="Traceback" in text, leak=_has_secret(text)
    )


def run_capture(case: Case, folder: Path, *, in_subprocess: bool = False) -> Result:
    """`llmgw doctor --replay DIR --facts --json`: it must answer, naming what it could not read."""
    capture = folder / "capture"
    materialise(case, capture)
    if not (capture / "host.json").exists():
        (capture / "host.json").write_text('{"cpu_only": false}')
    argv = ["doctor", "--replay", str(capture), "--facts", "--json"]
    env = {"LLMGW_AGENT_STATE": str(folder / "state")}
    if in_subprocess:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "llmgw_agent", *argv],
                capture_output=True,
                env={**_environment(), **env},
                timeout=CASE_TIMEOUT_S,
                cwd=folder,
            )
        except subprocess.TimeoutExpired:
            return Result(case, None, "", hang=True)
        got, stdout, text = done.returncode, done.stdout.decode(errors="replace"), ""
        text = done.stderr.decode(errors="replace")
    else:
        got, stdout, text, hang = _agent_main_in_process(argv, env)
        if hang:
            return Result(case, None, "", hang=True)
    note = ""
    errors = ""
    try:
        facts = json.loads(stdout)
        errors = "\n".join(str(e) for e in facts.get("errors", []))
    except ValueError:
        note = "the facts are not JSON"
    return Result(
        case,
        got,
        errors,
        traceback="Traceback" in stdout + text,
        leak=_has_secret(stdout + text),
        note=note,
    )


def _agent_main_in_process(argv: list[str], env: dict[str, str]) -> tuple[Any, str, str, bool]:
    """The agent's `main` here, its output captured: (exit code, stdout, stderr, hung)."""
    from llmgw_agent.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    umask = os.umask(0o022)  # the agent's main sets its own (077): this process's is given back
    os.umask(umask)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT_S)
    got: Any = None
    hang = False
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                got = main(argv)
            except SystemExit as exc:
                got = exc.code
            except _Hung:
                hang = True
            except Exception:
                import traceback

                traceback.print_exc()
    finally:
        os.umask(umask)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return got, out.getvalue(), err.getvalue(), hang


_FAKE_PYTHON = """#!/bin/sh
printf '%s\\0%s\\0%s' "$LLMGW_AGENT_REPLAY" "$LLMGW_AGENT_STATE" "$1"
"""
"""Stands in for `python3` on the shell's PATH: prints what arrived, NUL-separated."""


def run_shell(case: Case, folder: Path) -> Result:
    """The agent's launch line with a hostile value, run by a real /bin/sh: the value arrives whole."""
    from llmgw_core.fleet.deploy import serve_command

    assert case.shell is not None
    folder.mkdir(parents=True, exist_ok=True)
    fake = folder / "bin" / "python3"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(_FAKE_PYTHON)
    fake.chmod(0o755)
    ((key, value),) = case.shell.items()
    agent = folder / (value if key == "agent_path" else "agent.pyz")
    agent.write_text("")
    options: dict[str, str | None] = {"replay": None, "state_dir": None}
    if key != "agent_path":
        options[key] = value
    command = serve_command(agent_path=str(agent), **options)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ.get('PATH', '')}"}
    try:
        done = subprocess.run(
            command, shell=True, capture_output=True, cwd=folder, env=env, timeout=CASE_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return Result(case, None, "", hang=True)
    fields = done.stdout.decode(errors="replace").split("\0")
    note = ""
    if (folder / "PWNED").exists():
        note = "the shell ran the injected command"
    elif len(fields) != 3:
        note = f"the launch line did not run as one command: {done.stdout!r} {done.stderr!r}"
    else:
        arrived = dict(zip(("replay", "state_dir", "agent_path"), fields, strict=True))
        wanted = str(agent) if key == "agent_path" else value
        if arrived[key] != wanted:
            note = f"{key} arrived as {arrived[key]!r}"
    return Result(case, done.returncode, value, note=note)


class _Agent:
    """The real agent, `llmgw serve`, spoken to over its stdin and stdout."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        env = {**_environment(), "LLMGW_AGENT_STATE": str(folder / "state"), "HOME": str(folder)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llmgw_agent", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=folder,
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.hello = self.messages.get(timeout=CASE_TIMEOUT_S)
        self.pings = 0

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            try:
                self.messages.put(json.loads(raw))
            except ValueError:
                self.messages.put({"unreadable": raw.decode(errors="replace")})

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            self.stderr.append(raw.decode(errors="replace"))

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def exchange(self, line: bytes) -> tuple[list[dict[str, Any]], bool]:
        """Send a bad line then a ping; every message until both are answered, and whether in time."""
        self.pings += 1
        ping_id = f"ping-{self.pings}"
        self.send(line)
        self.send(json.dumps({"id": ping_id, "op": "ping"}).encode())
        got: list[dict[str, Any]] = []
        pinged = False
        deadline = time.monotonic() + CASE_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                message = self.messages.get(timeout=0.05 if pinged else 1.0)
            except queue.Empty:
                if pinged and any("ok" in m or "event" in m for m in got):
                    return got, True
                continue
            if message.get("id") == ping_id:
                pinged = True
            else:
                got.append(message)
        return got, False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def run_agent_cases(batch: list[Case], folder: Path) -> list[Result]:
    """Every protocol case through one agent (a new one if a case kills it)."""
    agent = _Agent(folder)
    results = []
    try:
        for case in batch:
            assert case.line is not None
            line = case.line() if callable(case.line) else case.line
            line = line.replace(b'"$ID"', json.dumps(case.id).encode())
            stderr_before = len(agent.stderr)
            got, in_time = agent.exchange(line)
            answers = [m for m in got if "ok" in m]
            events = [m for m in got if "event" in m]
            for message in events[:1]:
                agent.send(
                    json.dumps(
                        {"id": "stop", "op": "cancel", "args": {"target": message["id"]}}
                    ).encode()
                )
            code: str | None = None
            text = ""
            if answers and answers[0].get("ok") is False:
                code = answers[0]["error"].get("code")
                text = answers[0]["error"].get("message", "")
            elif answers or events:
                code = "answered"
                text = json.dumps(answers[0] if answers else events[0])[:300]
            died = agent.process.poll() is not None
            errors = "".join(agent.stderr[stderr_before:])
            results.append(
                Result(
                    case,
                    code,
                    text,
                    traceback="Traceback" in errors,
                    hang=not in_time and not died,
                    died=died,
                    leak=_has_secret(text),
                    note="" if len(answers) <= 1 else f"answered {len(answers)} times",
                )
            )
            if died:
                agent = _Agent(folder / f"after-{case.id}")
            time.sleep(0.01)
            while not agent.messages.empty():  # late stream ends of a cancelled watch
                agent.messages.get_nowait()
    finally:
        agent.close()
    return results


def run_case(case: Case, folder: Path, *, in_subprocess: bool = False) -> Result:
    """One non-protocol case in its own folder."""
    if case.kind == "shell":
        return run_shell(case, folder)
    if case.kind == "capture":
        return run_capture(case, folder, in_subprocess=in_subprocess)
    materialise(case, folder)
    return run_subprocess(case, folder) if in_subprocess else run_in_process(case, folder)


def run_all(root: Path) -> list[Result]:
    """Every case of the corpus; protocol cases share one agent.

    The canary secrets are in this process's environment while it runs, and
    only then: the agents later tests start inherit this environment.
    """
    saved = dict(os.environ)
    os.environ.update(ENV)
    try:
        return _run_all(root)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _run_all(root: Path) -> list[Result]:
    every = cases()
    results = []
    for case in every:
        if case.kind != "agent":
            started = time.monotonic()
            results.append(run_case(case, root / case.id))
            TIMES[case.category] = TIMES.get(case.category, 0.0) + time.monotonic() - started
    runs = [case for case in every if case.kind == "run"]
    firsts = {case.category: case for case in reversed(runs)}  # the first of each category
    sampled = [*firsts.values(), *(c for c in runs[::SUBPROCESS_EVERY] if c not in firsts.values())]
    sampled += [case for case in every if case.kind == "capture"][:: SUBPROCESS_EVERY // 5]
    results += [run_case(case, root / f"{case.id}-process", in_subprocess=True) for case in sampled]
    started = time.monotonic()
    results += run_agent_cases([case for case in every if case.kind == "agent"], root / "agent")
    TIMES["protocol"] = time.monotonic() - started
    leaked = [
        path
        for path in root.rglob("*")
        if path.is_file()
        and not path.is_symlink()
        and path.stat().st_size < 2**20
        and "state" in path.parts
        and SECRET.encode() in path.read_bytes()
    ]
    if leaked:
        results.append(
            Result(cases()[0], None, f"{len(leaked)} state files hold the secret", leak=True)
        )
    return results


def figures(results: list[Result]) -> dict[str, int]:
    """The counts docs/reliability.md reports."""
    return {
        "cases": len({r.case.id for r in results}),
        "runs": len(results),
        "clean": sum(r.clean for r in results),
        "tracebacks": sum(r.traceback for r in results),
        "hangs": sum(r.hang for r in results),
        "secret leaks": sum(r.leak for r in results),
        "agent deaths": sum(r.died for r in results),
    }


def main() -> int:
    """Run the corpus and print its figures, by category, then every failure."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llmgw-badinput-") as folder:
        results = run_all(Path(folder))
    seconds = time.monotonic() - started
    totals = figures(results)
    print("  ".join(f"{name}: {count}" for name, count in totals.items()) + f"  ({seconds:.0f} s)")
    for category in sorted({r.case.category for r in results}):
        mine = [r for r in results if r.case.category == category]
        print(
            f"  {category:10} {len(mine):4} runs, {sum(r.clean for r in mine):4} clean"
            f"  ({TIMES.get(category, 0.0):.0f} s)"
        )
    for result in results:
        if not result.clean:
            print("FAIL", result.why())
    return 0 if totals["clean"] == totals["runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
