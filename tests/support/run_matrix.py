"""Print the fault matrix: each fault → what the operator saw → how it ended → invariants; then races.

    .venv/bin/python tests/support/run_matrix.py               # every fault, 100 races
    .venv/bin/python tests/support/run_matrix.py --races 10 --only node_lost,engine_killed

Runs on a three-node demo fleet in a temporary folder (the disk-full fault
mounts a tmpfs: run it as root, or it says it was not run). Exits 1 when an
invariant broke or a race double-booked a card.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import matrix
import races
from bench import Bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=100, help="rounds of two racing consoles")
    parser.add_argument("--only", default="", help="comma-separated fault names (default: all)")
    options = parser.parse_args(argv)
    chosen = [f for f in matrix.FAULTS if not options.only or f.__name__ in options.only.split(",")]
    broken = 0
    with tempfile.TemporaryDirectory(prefix="llmgw-faults-") as folder:
        began = time.monotonic()
        bench = Bench(Path(folder))
        print(f"demo fleet: {', '.join(bench.demo.servers)} ({time.monotonic() - began:.1f} s)")
        try:
            for fault in chosen:
                if fault is matrix.disk_full and os.geteuid() != 0:
                    print(f"\n{fault.__name__}: not run (mounting a tmpfs needs root)")
                    continue
                outcome = matrix.run_fault(bench, fault)
                broken += not (outcome.invariants and outcome.invariants.held)
                print("\n" + outcome.row(), flush=True)
            if options.races:
                figures = races.race(bench, options.races)
                broken += bool(figures.double_bookings or figures.failures)
                print(f"\nraces: {figures.summary()}")
                for failure in figures.failures:
                    print(f"    {failure}")
        finally:
            bench.close()
    print(f"\n{len(chosen)} faults, {broken} with a broken invariant or a double-booking")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
