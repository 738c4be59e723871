"""The demo fleet kept up between runs: `llmgw-tui demo up | down | status [--dir DIR]`.

Like `kind create cluster`: `up` starts the demo fleet (its SSH servers, one
per simulated node) in a detached process and prints the path of its
inventory as its last line, so any number of consoles, scripts and browsers
use one demo fleet with `--inventory THAT_FILE`. Running `up` again while it
is up prints the same path. `down` stops it, and with it every agent and
shard its nodes ran: no process is left. `--demo` is untouched: it still
starts a fleet of its own for one console or script.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from llmgw_core.errors import BadInput
from llmgw_core.fleet.sim.demo import alive, demo_engines, sweep

STOPPING_FILE = "stopping"
"""The pid of the `down` asking the demo to stop: its sweep spares it (its argv names the folder)."""
UP_FILE = "up.json"
"""Written in the demo's folder once its servers listen: `{pid, inventory, started_at}`."""
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


def default_dir() -> Path:
    """`$XDG_STATE_HOME/llmgw-demo`, else `~/.local/state/llmgw-demo`."""
    from llmgw_core.user_dirs import state_home

    return state_home() / "llmgw-demo"


def running(folder: Path) -> dict | None:
    """The kept-up demo in `folder` when its process is alive, else None."""
    try:
        record = json.loads((folder / UP_FILE).read_text(encoding="utf-8"))
        pid = int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if alive(pid) else None


def demo_main(argv: list[str]) -> int:
    """`llmgw-tui demo up|down|status [--dir DIR]` (and the detached `serve` itself)."""
    parser = argparse.ArgumentParser(prog="llmgw-tui demo", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["up", "down", "status", "serve"])
    parser.add_argument("--dir", metavar="DIR", help=f"where it lives (default {default_dir()})")
    parser.add_argument(
        "--engine",
        action="append",
        default=[],
        metavar="ENGINE=PATH",
        help="with up: the CPU node (cpu-01) runs this real engine on this machine instead of "
        "the simulated one (vllm=…/bin/vllm, llama.cpp=…/llama-server or …/python3, "
        "sglang=…/python3)",
    )
    parser.add_argument(
        "--slurm",
        action="store_true",
        help="with up: also a real Slurm cluster on this machine (Debian's slurmctld, slurmd, "
        "slurm-client and munge), as inventory clusters hgx (2 H100 nodes) and nvl "
        "(4 GB200 trays)",
    )
    args = parser.parse_args(argv)
    folder = Path(args.dir).expanduser().resolve() if args.dir else default_dir()
    if args.engine and args.action not in ("up", "serve"):
        parser.error("--engine goes with up")
    if args.slurm and args.action not in ("up", "serve"):
        parser.error("--slurm goes with up")
    try:
        engines = demo_engines(args.engine)
        if args.slurm and args.action == "up":
            _check_slurm()
    except BadInput as exc:
        print(f"llmgw-tui: {exc.sentence()}", file=sys.stderr)
        return exc.exit_code
    if args.action == "up":
        return up(folder, args.engine, slurm=args.slurm)
    if args.action == "serve":
        return serve(folder, engines, slurm=args.slurm)
    return {"down": down, "status": status}[args.action](folder)


def _check_slurm() -> None:
    """Refuse `--slurm` where Slurm's daemons or clients are not installed.

    Raises:
        BadInput: naming what is missing and the packages that bring it.
    """
    from llmgw_core.fleet.sim.slurm import slurm_missing

    missing = slurm_missing()
    if missing:
        raise BadInput(f"demo up --slurm needs a local Slurm: {missing}")


def up(folder: Path, engines: list[str] | None = None, *, slurm: bool = False) -> int:
    """Start the demo fleet detached (unless it is up) and print its inventory's path.

    `engines`: `ENGINE=PATH` texts (checked) its CPU node runs for real. `slurm`: with the
    demo's Slurm cluster (`llmgw_core.fleet.sim.demo_slurm`).
    """
    found = running(folder)
    if found is not None:
        if engines or slurm != bool(found.get("slurm")):
            print(
                "llmgw-tui: the demo fleet is already up, as it was started"
                f" ({'with' if found.get('slurm') else 'without'} its Slurm cluster, with the"
                " engines it was given); demo down, then demo up to change that",
                file=sys.stderr,
            )
        print(found["inventory"])
        return 0
    if (folder / UP_FILE).exists():
        # Its process was killed outright: end what its nodes still run before starting anew.
        sweep(folder, spare=(os.getpid(),))
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(folder / "demo.log", "ab") as log:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "llmgw_tui.cli", "demo", "serve", "--dir", str(folder)),
                *(f"--engine={text}" for text in engines or ()),
                *(["--slurm"] if slurm else []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives this command and its terminal
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while (found := running(folder)) is None:
        if process.poll() is not None:
            print(f"llmgw-tui: the demo fleet did not start: {_last_line(folder)}", file=sys.stderr)
            return 1
        if time.monotonic() > deadline:
            process.kill()
            print(
                f"llmgw-tui: the demo fleet did not start in {START_TIMEOUT_S:g} s", file=sys.stderr
            )
            return 1
        time.sleep(0.1)
    print(f"the demo fleet is up in {folder} (pid {found['pid']}); use it with --inventory:")
    print(found["inventory"])
    return 0


def down(folder: Path) -> int:
    """Stop the kept-up demo fleet and everything its nodes run."""
    found = running(folder)
    if found is None:
        print(f"the demo fleet in {folder} is not up")
        return 0
    pid = int(found["pid"])
    (folder / STOPPING_FILE).write_text(str(os.getpid()), encoding="utf-8")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while alive(pid) and time.monotonic() < deadline:  # it sweeps its nodes' processes first
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        sweep(folder, spare=(os.getpid(),))
    print(f"the demo fleet in {folder} is down")
    return 0


def status(folder: Path) -> int:
    """Say whether the demo fleet is up, and where its inventory is."""
    found = running(folder)
    if found is None:
        print(f"the demo fleet in {folder} is down")
        return 3
    print(f"the demo fleet in {folder} is up (pid {found['pid']}): {found['inventory']}")
    return 0


def serve(
    folder: Path, engines: dict[str, dict[str, str]] | None = None, *, slurm: bool = False
) -> int:
    """The detached process: the demo fleet's servers until SIGTERM, then nothing left."""
    return asyncio.run(_serve(folder, engines or {}, slurm))


async def _serve(folder: Path, engines: dict[str, dict[str, str]], slurm: bool) -> int:
    from llmgw_core.fleet.sim.demo import start_demo_fleet

    demo = await start_demo_fleet(folder, real_engines=engines, slurm=slurm)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    record = {
        "pid": os.getpid(),
        "inventory": str(folder / "inventory.yaml"),
        "started_at": time.time(),
        "slurm": slurm,
    }
    temporary = folder / f"{UP_FILE}.tmp"
    temporary.write_text(json.dumps(record), encoding="utf-8")
    temporary.replace(folder / UP_FILE)
    print(f"up: {record['inventory']}", flush=True)
    try:
        await stop.wait()
    finally:
        (folder / UP_FILE).unlink(missing_ok=True)
        await demo.stop(spare=_stopping(folder))
    print("down", flush=True)
    return 0


def _stopping(folder: Path) -> tuple[int, ...]:
    try:
        return (int((folder / STOPPING_FILE).read_text(encoding="utf-8").strip()),)
    except (OSError, ValueError):
        return ()


def _last_line(folder: Path) -> str:
    try:
        lines = (folder / "demo.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no output"
    return lines[-1] if lines else "no output"
