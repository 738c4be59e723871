"""The console's first frame in machine instructions, next to a minimal Textual app (printed, never asserted).

    .venv/bin/python tests/benchmarks/bench_first_frame_instructions.py

Wall and CPU times of a cold start swing by 20 % on a shared machine; the
number of instructions a process runs barely moves (±0.1 %). This runs the
two snippets of `bench_tui.py` (the console with a fleet still connecting,
stopped at its first frame, and a one-`Static` Textual app) under
`valgrind --tool=cachegrind --cache-sim=no` and prints the instructions of
each whole process (start, first frame, exit) and their ratio. A ratio of
instructions is not a ratio of times (reading files and bytecode weighs more
in time), but it tells a change that cuts work from noise. Each snippet runs
once first, unmeasured, so its bytecode is written. Needs valgrind
(`apt-get install valgrind`); about 15 s a run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
from bench_tui import CONSOLE, MINIMAL  # noqa: E402  (the console's own cold-start snippets)

CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def instructions(code: str) -> int:
    """Instructions one fresh interpreter runs for `code` (after one unmeasured run)."""
    command = [sys.executable, "-c", code, repr(time.time())]
    subprocess.run(command, capture_output=True, check=True, cwd=REPO, env=CHILD_ENV)
    counter = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    done = subprocess.run(
        [*counter, *command],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=CHILD_ENV,
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"valgrind did not count the run: {done.stderr.strip()[-300:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    """Print both counts and the ratio."""
    if shutil.which("valgrind") is None:
        print("(no valgrind: apt-get install valgrind)")
        return
    minimal = instructions(MINIMAL)
    console = instructions(CONSOLE)
    print(f"first frame, instructions: minimal Textual app {minimal / 1e6:7.1f} M")
    print(f"first frame, instructions: llmgw console       {console / 1e6:7.1f} M")
    print(f"ratio console / minimal: {console / minimal:.3f}")


if __name__ == "__main__":
    main()
