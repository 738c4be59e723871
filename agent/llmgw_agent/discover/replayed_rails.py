"""A simulated node's adapters and the speed each carries: what its fabric test measures and
what the sim engine's KV transfer goes at (one figure for both)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from llmgw_agent.discover import host, ib

SIM_EFFICIENCY = 0.972
"""A healthy simulated rail reaches 97.2 % of its rate (the captured RoCE run: 388.7 of 400)."""


def replay_adapters(replay: str) -> Dict[str, Dict[str, Any]]:
    """The simulated node's adapters by name, each with the Gb/s a test would measure.

    A healthy rail carries 97.2 % of its port rate; a rail the profile marks
    in `host.json` `sim.fabric_ratio` ({adapter: ratio}) carries that share
    of its rated speed (the demo's degraded rail: 0.6).
    """
    directory = Path(replay)
    sys_ib = directory / "sys" / "class" / "infiniband"
    if sys_ib.is_dir():
        records = ib.read_sysfs(sys_ib)
    else:
        ibstat = directory / "ibstat.txt"
        records = ib.parse_ibstat(ibstat.read_text(errors="replace")) if ibstat.is_file() else []
    rated = ib.rated_speeds(records)
    try:
        sim = host.read_host_json(directory / "host.json").get("sim") or {}
    except ValueError:
        sim = {}
    ratios = sim.get("fabric_ratio") or {} if isinstance(sim, dict) else {}
    adapters = {}
    for record in records:
        entry = dict(record)
        rated_gbps = rated.get("{}:{}".format(record["name"], record["port"])) or 0.0
        if record["name"] in ratios:
            entry["sim_gbps"] = float(rated_gbps) * float(ratios[record["name"]])
        else:
            entry["sim_gbps"] = float(record.get("rate_gbps") or 0.0) * SIM_EFFICIENCY
        adapters[record["name"]] = entry
    return adapters
