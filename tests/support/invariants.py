"""The check run after every fault: cards, claims, processes and replicas agree.

Claims and shards are read through each node's agent (what any console
sees); engine processes are read from /proc (an engine whose shard the agent
lost track of is exactly what must be caught, so the agent's word is not
enough). The nodes are on this machine, each with its own state directory,
which every process a shard starts carries in its environment.

Held when:
  (a) no card is in two live shards of a node, and every live shard holds
      the claim of every card it runs on;
  (b) every claim is held by a live shard (its supervisor or engine alive);
  (c) every live engine process has the claims of its cards;
  (d) every live shard belongs to the current attempt of a replica that is
      not failed (nothing left running for a replica given up or replaced).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmgw_core.serve.replicas import replicas_now

TERMINAL = ("exited", "failed", "stopped")


@dataclass
class Invariants:
    """What the check found: counts, and one sentence per broken invariant."""

    claims: int = 0
    live_shards: int = 0
    engine_processes: int = 0
    broken: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return not self.broken

    def summary(self) -> str:
        """One line: held (with the counts) or what broke."""
        counts = (
            f"{self.claims} claims, {self.live_shards} live shards, "
            f"{self.engine_processes} engine processes"
        )
        if self.held:
            return f"held ({counts})"
        return f"BROKEN ({counts}): " + "; ".join(self.broken)


def _environ(pid: str) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    found = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            found[key.decode(errors="replace")] = value.decode(errors="replace")
    return found


def _alive(pid: str) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def engine_processes(state_dirs: dict[str, Path]) -> list[dict[str, Any]]:
    """Every live process a shard started on these nodes: `{node, pid, shard_id, gpus}`."""
    by_dir = {str(path.resolve()): node for node, path in state_dirs.items()}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        env = _environ(entry)
        if "LLMGW_SHARD_ID" not in env or not _alive(entry):
            continue
        state = env.get("LLMGW_AGENT_STATE", "")
        node = by_dir.get(str(Path(state).resolve())) if state else None
        if node is None:
            continue
        gpus = [g for g in env.get("LLMGW_SHARD_GPUS", "").split(",") if g]
        found.append(
            {"node": node, "pid": int(entry), "shard_id": env["LLMGW_SHARD_ID"], "gpus": gpus}
        )
    return found


async def check(fleet: Any, state_dirs: dict[str, Path]) -> Invariants:
    """Read every node through its agent and /proc, and check (a)–(d).

    Every node must answer: a node that does not cannot be checked, which is
    itself reported as broken.
    """
    result = Invariants()
    claims: dict[str, dict[str, str]] = {}
    live: dict[str, list[dict[str, Any]]] = {}
    for node in state_dirs:
        try:
            held = (await fleet.request(node, "claims", timeout_s=30))["claims"]
            shards = (await fleet.request(node, "shard.list", timeout_s=30))["shards"]
        except Exception as exc:  # the check's edge: a node that cannot be read is a finding
            result.broken.append(f"{node} could not be read: {exc}")
            continue
        claims[node] = {str(c["gpu"]): str(c["shard_id"]) for c in held}
        live[node] = [s for s in shards if s["phase"] not in TERMINAL]
        result.claims += len(held)
        result.live_shards += len(live[node])
    for node, shards in live.items():
        seen: dict[str, str] = {}
        for shard in shards:
            for gpu in shard["gpus"]:
                if gpu in seen:
                    result.broken.append(
                        f"(a) {node} GPU {gpu} is in two live shards: {seen[gpu]} and "
                        f"{shard['shard_id']}"
                    )
                seen[gpu] = shard["shard_id"]
                if claims[node].get(gpu) != shard["shard_id"]:
                    result.broken.append(
                        f"(a) {node} shard {shard['shard_id']} runs on GPU {gpu} whose claim is "
                        f"held by {claims[node].get(gpu) or 'nobody'}"
                    )
        live_ids = {s["shard_id"] for s in shards}
        for gpu, holder in claims[node].items():
            if holder not in live_ids:
                result.broken.append(
                    f"(b) {node} GPU {gpu} is claimed by {holder}, which is not live"
                )
    processes = engine_processes(state_dirs)
    result.engine_processes = len(processes)
    for process in processes:
        node = process["node"]
        for gpu in process["gpus"]:
            if claims.get(node, {}).get(gpu) != process["shard_id"]:
                result.broken.append(
                    f"(c) {node} pid {process['pid']} of shard {process['shard_id']} runs on GPU "
                    f"{gpu} without its claim"
                )
    views = await replicas_now(fleet, grace_s=0)
    current = {(shard.node, shard.shard_id): view for view in views for shard in view.shards}
    for node, shards in live.items():
        for shard in shards:
            view = current.get((node, shard["shard_id"]))
            if view is None:
                result.broken.append(
                    f"(d) {node} shard {shard['shard_id']} of {shard['replica']} still runs for "
                    "an attempt that was replaced"
                )
            elif view.phase == "failed":
                result.broken.append(
                    f"(d) {node} shard {shard['shard_id']} still runs for failed replica "
                    f"{view.name} ({view.reason})"
                )
    return result
