"""Time to plan one repository's every file against a described fleet of 1,000 nodes.

Printed next to the time `llmgw-tui --help` takes to do nothing, which is
what a person waits for anyway: planning should be a small fraction of it.
Run: `.venv/bin/python tests/benchmarks/bench_plan.py`. Not collected by pytest.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from llmgw_core.catalog import catalog_model
from llmgw_core.planner.plan import plan
from llmgw_core.planner.pools import described_fleet

# 1,000 nodes: GPU classes, fabrics, an NVL72 domain, MIG, PCIe and CPU nodes mixed.
FLEET = [
    {"name": "dgx-a", "count": 300, "gpu": "h100-80g", "gpus": 8, "fabric": "ib-a", "busy": 3},
    {"name": "dgx-b", "count": 200, "gpu": "h100-80g", "gpus": 8, "fabric": "ib-b"},
    {"name": "hgx", "count": 150, "gpu": "h200-141g", "gpus": 8, "fabric": "roce-c"},
    {"name": "bw", "count": 100, "gpu": "b200-180g", "gpus": 8, "fabric": "ib-d"},
    {
        "name": "nvl",
        "count": 72,
        "gpu": "gb200-186g",
        "gpus": 4,
        "nvlink_domain": "nvl72-a",
        "fabric": "ib-e",
    },
    {"name": "amp", "count": 60, "gpu": "a100-80g", "gpus": 8, "fabric": "ib-f"},
    {"name": "mig", "count": 30, "gpu": "a100-80g-mig-3g.40gb", "gpus": 2},
    {"name": "pcie", "count": 40, "gpu": "l40s-48g", "gpus": 4, "nvlink": False},
    {"name": "cpu", "count": 48, "gpus": 0, "memory_gib": 512},
]

REFUSED_SCRIPT = [sys.executable, "-m", "llmgw_tui.cli", "--run", "-", "--json"]

REPOSITORIES = (
    ("catalog:Qwen/Qwen2.5-14B-Instruct-GGUF", 32768),
    ("catalog:meta-llama/Llama-3.3-70B-Instruct", 32768),
    ("catalog:Qwen/Qwen3-235B-A22B", 32768),
)


def _best_of(runs: int, action) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    nodes = sum(entry.get("count", 1) for entry in FLEET)
    build_s = _best_of(3, lambda: described_fleet(FLEET).pools())
    fleet = described_fleet(FLEET)
    print(
        f"fleet: {nodes} nodes, {len(fleet.pools())} pools; built and pooled in {build_s * 1000:.1f} ms"
    )
    help_runs = [
        _best_of(
            1,
            lambda: subprocess.run(
                [sys.executable, "-m", "llmgw_tui.cli", "--help"], capture_output=True, check=True
            ),
        )
        for _ in range(5)
    ]
    help_s = statistics.median(help_runs)
    print(f"llmgw-tui --help (start-up, doing nothing): {help_s * 1000:.0f} ms (median of 5)")
    # The runner's own start-up: a script refused at validation (every step imported, nothing run).
    refused = [
        _best_of(
            1,
            lambda: subprocess.run(
                REFUSED_SCRIPT, input="steps:\n  - nothing: {}\n", text=True, capture_output=True
            ),
        )
        for _ in range(5)
    ]
    print(
        f"llmgw-tui --run (runner start-up, script refused): {statistics.median(refused) * 1000:.0f} ms (median of 5)"
    )
    for ref, context in REPOSITORIES:
        model = catalog_model(ref)
        result = plan(model, fleet, context=context)
        plan_s = _best_of(
            5, lambda model=model, context=context: plan(model, fleet, context=context)
        )
        print(
            f"plan {ref.removeprefix('catalog:')}: {len(model.artifacts)} file set(s), "
            f"{len(result.options)} ways, {plan_s * 1000:.1f} ms "
            f"({plan_s / help_s:.0%} of start-up); best: {result.best.label() if result.best else 'none'}"
        )
    # The schema's largest entry: 100,000 nodes of 1,024 cards, one shape.
    largest = [{"name": "dgx", "count": 100_000, "gpu": "h100-80g", "gpus": 1024, "fabric": "ib-a"}]
    model = catalog_model("catalog:meta-llama/Llama-3.1-8B-Instruct")
    whole_s = _best_of(3, lambda: plan(model, described_fleet(largest), context=8192))
    print(
        f"the largest legal described fleet (100,000 × 1,024 cards), built and planned: "
        f"{whole_s * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
