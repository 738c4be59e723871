"""Prints how long discovery takes on each simulated profile (not collected by pytest).

    .venv/bin/python tests/benchmarks/bench_discover_profiles.py

Two figures per profile: `collect_facts` in-process (the parse), and
`python3 -S -m llmgw_agent doctor --replay DIR --facts --json` as a node runs
it (interpreter start + imports + parse + JSON).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "agent"))

from llmgw_agent.discover import collect_facts  # noqa: E402
from llmgw_agent.sim.profiles import PROFILES, write_profile  # noqa: E402


def _median_ms(action, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    """Print one line per profile: in-process and subprocess milliseconds (medians)."""
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LLMGW_AGENT_STATE"] = str(Path(tmp) / "state")
        env = dict(os.environ, PYTHONPATH=str(ROOT / "agent"))
        print("{:<11} {:>12} {:>14}".format("profile", "parse ms", "python3 -S ms"))
        for kind in PROFILES:
            capture = write_profile(kind, Path(tmp) / kind)
            parse_ms = _median_ms(lambda c=capture: collect_facts(replay=str(c)), 20)
            argv = [
                sys.executable,
                "-S",
                "-m",
                "llmgw_agent",
                "doctor",
                "--replay",
                str(capture),
                "--facts",
                "--json",
            ]
            run_ms = _median_ms(
                lambda a=argv: subprocess.run(a, env=env, capture_output=True, check=True, cwd="/"),
                5,
            )
            print(f"{kind:<11} {parse_ms:>12.1f} {run_ms:>14.1f}")


if __name__ == "__main__":
    main()
