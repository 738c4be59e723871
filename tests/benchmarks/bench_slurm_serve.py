"""From `serve` to the first answered request: a replica as a Slurm job on the suite's local
cluster, beside the same on SSH demo nodes (printed, never asserted).

    .venv/bin/python tests/benchmarks/bench_slurm_serve.py [--runs N]

Each run is one headless script, `serve` (Llama 3.1 8B on one H100, the sim engine) then
`ask` through the engine, timed from the process's start to its end, and then the replica
is stopped in a run of its own (not timed). The same script with `replicas` alone is timed
too: what opening the fleet costs on each side, so the difference is serving's own. The
two sides run alternately, so a busy machine slows both alike; medians are printed.

On Slurm the serve submits a job, waits for the controller to start it (its scheduling
pass), joins the job's node through `srun --overlap` from the login node and starts the
engine there; on the demo it places and starts the engine over SSH on a node it has.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import _paths  # noqa: F401  (tests/support on the path)
from kept_demo import kept_demo, run_json
from slurm_cluster import slurm_missing, start_cluster
from slurm_login import login_node, write_captures

MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"
LAYOUT = "context: 8192, gpu_class: h100-80g, gpus: 1"


def _timed(inventory: str, script: str, env: dict[str, str] | None) -> float:
    began = time.monotonic()
    code, lines, said = run_json(inventory, script, env=env)
    spent = time.monotonic() - began
    if code != 0:
        raise SystemExit(f"the script failed ({code}): {said[-2000:]} {lines}")
    return spent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    missing = slurm_missing()
    if missing:
        raise SystemExit(missing)
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as folder:
        root = Path(folder)
        cluster = start_cluster(root / "slurm")
        try:
            captures = write_captures(
                root / "captures", {"h100-1": "hgx-h100", "h100-2": "hgx-h100"}
            )
            entry = (
                "  - name: big\n"
                f"    slurm: {{login: slurm-login, partition: gpu, replay: {captures}}}\n"
            )
            (root / "login").mkdir()
            with (
                login_node(root / "login", {"SLURM_CONF": str(cluster.conf)}, entry) as (
                    slurm_inventory,
                    slurm_env,
                ),
                kept_demo(root / "demo") as demo_inventory,
            ):
                sides = {
                    "slurm": (slurm_inventory, slurm_env, ", cluster: big"),
                    "ssh demo": (demo_inventory, None, ""),
                }
                figures: dict[str, dict[str, list[float]]] = {
                    side: {"open": [], "serve": []} for side in sides
                }
                for run in range(runs + 1):  # the first run of each side warms it, untimed
                    for side, (inventory, env, where) in sides.items():
                        name = f"b{run}"
                        serve = (
                            "steps:\n"
                            f"  - serve: {{model: '{MODEL}', {LAYOUT}, name: {name}{where}}}\n"
                            f"  - ask: {{replica: {name}, prompt: hi, max_tokens: 4}}\n"
                        )
                        opened = _timed(inventory, "steps: [{replicas: {}}]", env)
                        served = _timed(inventory, serve, env)
                        _timed(inventory, f"steps: [{{stop: {{replica: {name}}}}}]", env)
                        if run:
                            figures[side]["open"].append(opened)
                            figures[side]["serve"].append(served)
        finally:
            cluster.stop()
    print(f"serve -> first answer, median of {runs} runs (wall seconds of the whole CLI run)")
    for side, timed in figures.items():
        opened, served = statistics.median(timed["open"]), statistics.median(timed["serve"])
        print(
            f"  {side:9} serve+ask {served:6.2f} s   fleet open alone {opened:6.2f} s   "
            f"serving's own {served - opened:6.2f} s"
        )


if __name__ == "__main__":
    main()
