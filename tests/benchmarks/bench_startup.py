"""Start-up figures, each next to its reference, measured side by side in one run (printed, never asserted).

    .venv/bin/python tests/benchmarks/bench_startup.py [--runs N] [--skip-ssh]

1. The headless runner, from spawning the interpreter to its first step
   (a `plan` against a described fleet), next to `python3 -c "import yaml,
   pydantic"`. Goal: at most 2x.
2. The console, from spawning the interpreter to its first frame, next to a
   minimal Textual app (the snippets of `bench_tui.py`). Goal: at most 1.3x.
   Also next to a Textual app drawing the same widgets as the console's
   first frame (header, status line, filter input, table, footer with the
   same keys): what Textual itself costs for that frame.
3. The whole CLI discovering 8 OpenSSH nodes on loopback
   (`llmgw-tui --inventory FILE --run nodes.yaml --json`, agents already
   deployed), next to `ssh -p PORT 127.0.0.1 true` on the 8 at once.
   Goal: at most 1.5x. Needs `sshd` (apt-get install openssh-server).

Each pair is run alternately, `--runs` times (default 7), so a busy machine
slows both sides alike; the median wall time is printed, and for the first
two the child's CPU seconds too (steadier than wall time on a shared host).

Children run as on a user's machine: Python may write bytecode
(`PYTHONDONTWRITEBYTECODE` is dropped from their environment; a sandbox
that sets it would make every start compile this project's sources while
the libraries beside it, compiled at install, do not), and each side runs
once before the measured runs, so every figure is a warm start.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
from bench_tui import CONSOLE, MINIMAL  # noqa: E402  (the console's own cold-start snippets)

REFERENCE_IMPORTS = """
import sys, time
t0 = float(sys.argv[1])
import yaml, pydantic
print(time.time() - t0, flush=True)
import os
os._exit(0)  # as the runner's side below: neither pays for the interpreter's teardown
"""

# The runner as `llmgw-tui --run` starts it; the first step's call prints the
# time and ends the process, so nothing after start-up is counted.
RUNNER_TO_FIRST_STEP = """
import os, sys, time
t0 = float(sys.argv[1])
from dataclasses import replace
from llmgw_tui.cli import before_any_model, main
before_any_model()  # main's first call, before the runner below is imported to be patched
from llmgw_core.script import runner
def first_step(args, ctx):
    print(time.time() - t0, flush=True)
    os._exit(0)
load_step = runner.load_step
runner.load_step = lambda name: replace(load_step(name), run=first_step)
main(["--run", sys.argv[2], "--json"])
"""

SAME_WIDGETS = """
import sys, time
t0 = float(sys.argv[1])
from textual.app import App
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static
class Fleet(Screen):
    BINDINGS = [Binding("slash", "filter", "Filter", key_display="/"),
                Binding("r", "refresh", "Refresh"), Binding("enter", "open", "Node page")]
    def compose(self):
        yield Header()
        yield Static("connecting to the fleet...")
        yield Input(placeholder="filter nodes")
        table = DataTable(cursor_type="row", zebra_stripes=True)
        for label in ("Node", "State", "GPUs", "Fabric", "Domain", "Shards", "Agent"):
            table.add_column(label)
        yield table
        yield Static("")
        yield Footer()
class Same(App):
    BINDINGS = [Binding(k, "bell", d) for k, d in (("question_mark", "Help"), ("colon", "Command"),
                ("1", "Fleet"), ("2", "Racks"), ("3", "Plan"), ("4", "Replicas"), ("5", "Serve"),
                ("q", "Quit"))]
    MODES = {"fleet": Fleet}
    DEFAULT_MODE = "fleet"
async def first_frame(pilot):
    await pilot.pause()
    print(time.time() - t0)
    pilot.app.exit()
Same().run(headless=True, size=(120, 40), auto_pilot=first_frame)
"""

PLAN_SCRIPT = """
fleet:
  - {name: dgx, count: 2, gpu: h100-80g, gpus: 8, fabric: ib-a}
steps:
  - plan: {model: catalog:meta-llama/Llama-3.3-70B-Instruct, context: 32768}
"""


CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def spawn_s(code: str, *extra: str) -> tuple[float, float]:
    """(seconds the child printed, CPU seconds the child used) for one fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [sys.executable, "-c", code, repr(time.time()), *extra],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=CHILD_ENV,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(out.stdout.strip().splitlines()[-1]), cpu_s


def side_by_side(
    runs: int, ours: Callable[[], tuple[float, float]], reference: Callable[[], tuple[float, float]]
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Medians of (wall, cpu) for both, run alternately after one unmeasured run of each."""
    ours()
    reference()
    mine, theirs = [], []
    for _ in range(runs):
        mine.append(ours())
        theirs.append(reference())

    def medians(rows: list[tuple[float, float]]) -> tuple[float, float]:
        return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)

    return medians(mine), medians(theirs)


def row(label: str, ours: tuple[float, float], reference: tuple[float, float], goal: float) -> None:
    wall_ratio = ours[0] / reference[0]
    cpu_ratio = ours[1] / reference[1] if reference[1] else float("nan")
    print(
        f"{label:<38} {1000 * ours[0]:>8.0f} {1000 * reference[0]:>8.0f} {wall_ratio:>6.2f}x"
        f" {1000 * ours[1]:>8.0f} {1000 * reference[1]:>8.0f} {cpu_ratio:>6.2f}x   goal <= {goal}x"
    )


def discovery_figures(runs: int, nodes: int = 8) -> tuple[float, float] | None:
    """(median whole-CLI discovery s, median ssh-true fan-out s) over `nodes` loopback sshd ports."""
    from bench_discovery import (
        PORTS_PER_SSHD,
        SSHD,
        free_port,
        ssh_true_fanout,
        start_sshd,
        write_keys,
    )

    from llmgw_agent.sim.profiles import write_profile

    if not Path(SSHD).exists():
        print("(no sshd: apt-get install openssh-server; discovery skipped)")
        return None
    root = Path(tempfile.mkdtemp(prefix="llmgw-bench-startup-"))
    servers: list[subprocess.Popen[bytes]] = []
    try:
        key, key_file, host_key_file, host_public = write_keys(root)
        capture = write_profile("hgx-h100", root / "capture")
        ports = [free_port() for _ in range(nodes)]
        known_hosts = root / "known_hosts"
        known_hosts.write_text("".join(f"[127.0.0.1]:{port} {host_public}\n" for port in ports))
        for index in range(0, nodes, PORTS_PER_SSHD):
            servers.append(
                start_sshd(
                    root / f"sshd-{index}",
                    ports[index : index + PORTS_PER_SSHD],
                    key.export_public_key().decode(),
                    host_key_file,
                )
            )
        inventory = root / "fleet.yaml"
        inventory.write_text(
            "nodes:\n"
            + "".join(
                f"  - {{name: n{i}, host: 127.0.0.1, port: {port}, user: {getpass.getuser()}, "
                f"identity_file: {key_file}, replay: {capture}, work_dir: {root / f'state-{i}'}}}\n"
                for i, port in enumerate(ports)
            )
            + f"known_hosts: {known_hosts}\n"
        )
        script = root / "nodes.yaml"
        script.write_text("steps:\n  - nodes: {all_ready: true}\n")
        command = [
            *_cli(),
            "--inventory",
            str(inventory),
            "--run",
            str(script),
            "--json",
        ]
        env = {k: v for k, v in CHILD_ENV.items() if k != "SSH_AUTH_SOCK"}
        env["HOME"] = str(root)  # no ~/.ssh/config of the person running it

        def cli_once() -> float:
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
            elapsed = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(f"the CLI failed ({done.returncode}): {done.stdout}{done.stderr}")
            return elapsed

        cli_once()  # deploys the agent: the figures below are the usual, warm case
        clis, fanouts = [], []
        for _ in range(runs):
            clis.append(cli_once())
            fanouts.append(asyncio.run(ssh_true_fanout(ports, key_file, known_hosts)))
        return statistics.median(clis), statistics.median(fanouts)
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)
        shutil.rmtree(root, ignore_errors=True)


def _cli() -> list[str]:
    """The installed `llmgw-tui` beside this interpreter, else the module."""
    script = Path(sys.executable).with_name("llmgw-tui")
    return [str(script)] if script.exists() else [sys.executable, "-m", "llmgw_tui.cli"]


def console_rows(runs: int) -> float:
    """Print the console's two first-frame rows; the CPU ratio to the minimal Textual app."""
    ours, reference = side_by_side(runs, lambda: spawn_s(CONSOLE), lambda: spawn_s(MINIMAL))
    row("console first frame / minimal Textual", ours, reference, 1.3)
    ratio = ours[1] / reference[1]
    ours, reference = side_by_side(runs, lambda: spawn_s(CONSOLE), lambda: spawn_s(SAME_WIDGETS))
    row("console first frame / same widgets", ours, reference, 1.3)
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--skip-ssh", action="store_true")
    parser.add_argument(
        "--console-only", action="store_true", help="only the console's first-frame rows"
    )
    options = parser.parse_args()
    print(
        f"start-up, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]},"
        f" median of {options.runs} alternating runs"
    )
    print(f"{'':<38} {'ms':>8} {'ref ms':>8} {'wall':>7} {'cpu ms':>8} {'ref cpu':>8} {'cpu':>7}")
    if options.console_only:
        console_rows(options.runs)
        return
    with tempfile.TemporaryDirectory() as folder:
        plan = Path(folder) / "plan.yaml"
        plan.write_text(PLAN_SCRIPT)
        ours, reference = side_by_side(
            options.runs,
            lambda: spawn_s(RUNNER_TO_FIRST_STEP, str(plan)),
            lambda: spawn_s(REFERENCE_IMPORTS),
        )
    row("runner to first step / import yaml+pyd.", ours, reference, 2.0)
    console_rows(options.runs)
    if options.skip_ssh:
        return
    figures = discovery_figures(options.runs)
    if figures is not None:
        cli_s, fanout_s = figures
        print(
            f"{'CLI discovers 8 OpenSSH nodes / ssh true':<38} {1000 * cli_s:>8.0f}"
            f" {1000 * fanout_s:>8.0f} {cli_s / fanout_s:>6.2f}x {'':>26}   goal <= 1.5x"
        )


if __name__ == "__main__":
    main()
