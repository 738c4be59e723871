"""What a replica looks like in a table: one row per replica, one per shard (pure).

The console's replicas screen and any headless listing show the same words
from the same `ReplicaView`: the way, the endpoint, how many shards run, the
NCCL transport once known, and a node's download as a bar.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmgw_core.engines.flags import shown_flags
from llmgw_core.engines.latency import seconds_text
from llmgw_core.serve.view import ReplicaView, ShardView

if TYPE_CHECKING:
    from llmgw_core.serve.loads import ReplicaLoad

BAR_CELLS = 12
"""Width of a download bar, in characters."""

DOWNLOAD_SCALE_BYTES = 1024**3
"""A download bar fills once per GiB fetched (the weights' size is not carried by the replica)."""


@dataclass(frozen=True)
class ReplicaRow:
    """A replica as one row of words."""

    name: str
    phase: str
    engine: str
    way: str
    endpoint: str
    shards: str
    transport: str


@dataclass(frozen=True)
class ShardRow:
    """A shard as one row of words."""

    rank: str
    node: str
    gpus: str
    phase: str
    why: str


def shard_transport(view: ReplicaView, shard: ShardView) -> str | None:
    """What the shard's NCCL runs over (`NVLink`, `NVLink + IB + GDR`), or why it is not known
    (`(one card: no NCCL)`); None before the logs were read."""
    found = view.transports.get(shard.shard_id)
    if not found:
        return None
    kv = f" · {found['kv']['label']}" if found.get("kv") else ""  # a prefill/decode worker's
    if found.get("label"):
        return str(found["label"]) + kv
    return f"({found['unknown']}){kv}" if found.get("unknown") else kv.lstrip(" ·") or None


def compact_gpus(gpus: tuple[str, ...]) -> str:
    """`GPU-0, GPU-1`; more than two as `8: GPU-0 … GPU-7`; `RAM` for a CPU shard."""
    if not gpus:
        return "RAM"
    if len(gpus) <= 2:
        return ", ".join(gpus)
    return f"{len(gpus)}: {gpus[0]} … {gpus[-1]}"


def slurm_job_text(job: Mapping[str, Any]) -> str:
    """A Slurm replica's job as the console names it: `job 12 on big`, then, once the
    scheduler was asked, its state and Slurm's reason: `job 12 on big · PENDING (Resources)`,
    `job 12 on big · RUNNING`, `job 12 on big · GONE`; "" for a replica that is no job."""
    if not job.get("job_id"):
        return ""
    text = f"job {_one_line(job['job_id'])} on {_one_line(job.get('cluster'))}"
    state = job.get("state")
    if state:
        text += f" · {_one_line(state)}"
        reason = job.get("reason")
        if reason and reason != "None":
            text += f" ({_one_line(reason)})"
    return text


def _one_line(value: Any) -> str:
    """A value of the scheduler's on one line (a newline would add a row to the table)."""
    return " ".join(str(value).split()) or "?"


def replica_row(view: ReplicaView, job: Mapping[str, Any] | None = None) -> ReplicaRow:
    """`llama-70b · ready · vllm · 4 × h100-80g · h100-a-01:8000 · 1/1 running · IB + GDR`;
    on Slurm the way names the job, and its state and reason where `job` (the scheduler's
    answer now, `with_job_states`) gives them: `1 × h100-80g · job 12 on big · RUNNING`."""
    running = sum(s.phase == "running" for s in view.shards)
    expected = len(view.spec.get("placement", {}).get("nodes", [])) or len(view.shards)
    transports = sorted({t for t in (shard_transport(view, s) for s in view.shards) if t})
    way = str((view.spec.get("way") or {}).get("label") or "-")
    slurm = view.spec.get("slurm") or {}
    if isinstance(slurm, Mapping) and slurm.get("job_id"):
        way += " · " + slurm_job_text(job or slurm)  # a replica is a Slurm job
    return ReplicaRow(
        name=view.name,
        phase=view.phase,
        engine=str(view.spec.get("engine") or "-"),
        way=way,
        endpoint=view.endpoint or "-",
        shards=f"{running}/{expected}",
        transport=", ".join(transports) or "-",
    )


def shard_row(shard: ShardView) -> ShardRow:
    """`r1 · gpu-a-02 · 0,1,2,3 · running · -`."""
    why = shard.reason or (f"exit code {shard.exit_code}" if shard.exit_code else "")
    return ShardRow(
        rank=f"r{shard.rank}",
        node=shard.node,
        gpus=compact_gpus(shard.gpus),
        phase=shard.phase,
        why=why or "-",
    )


def download_bar(fetched_bytes: int, rate_bytes_s: float) -> str:
    """`▓▓▓▓░░░░░░░░ 4.2 GB at 410 MB/s`: bytes fetched so far and the rate now.

    The bar fills once per `DOWNLOAD_SCALE_BYTES` and starts again, so it moves
    while bytes arrive even though the total is not known here.
    """
    within = fetched_bytes % DOWNLOAD_SCALE_BYTES / DOWNLOAD_SCALE_BYTES
    filled = round(within * BAR_CELLS)
    bar = "▓" * filled + "░" * (BAR_CELLS - filled)
    return f"{bar} {fetched_bytes / 1e9:.1f} GB at {rate_bytes_s / 1e6:.0f} MB/s"


def shards_on_node(views: Iterable[ReplicaView], node: str) -> list[str]:
    """One line per shard a node runs: `llama-70b r0 · GPU-0 … GPU-3 · running · NCCL NVLink`,
    then the engine flags it was started with, if any (`· kv_cache_dtype=fp8`)."""
    lines = []
    for view in views:
        for shard in view.shards:
            if shard.node != node:
                continue
            transport = shard_transport(view, shard) or "-"
            flags = view.spec.get("engine_args") or {}
            shown = " · " + shown_flags(flags) if flags else ""
            if shard.rank == 0 and view.adapters:
                shown += " · adapters " + ", ".join(a["name"] for a in view.adapters)
            lines.append(
                f"{view.name} r{shard.rank} · {compact_gpus(shard.gpus)} · {shard.phase}"
                f" · NCCL {transport}{shown}"
            )
    return lines


def adapters_line(view: ReplicaView) -> str | None:
    """The LoRA adapters the replica's engine holds, as clients ask for them: `adapters sql,
    support (on meta-llama/Llama-3.1-8B-Instruct); only these (the engine applies its one to
    every request)`; None for none."""
    if not view.adapters:
        return None
    names = ", ".join(a["name"] for a in view.adapters)
    text = f"adapters {names} (on {view.spec.get('served_name') or view.name})"
    if view.spec.get("adapter_only"):
        text += "; the model itself is not served bare (its engine applies the adapter always)"
    return text


def figures_line(view: ReplicaView) -> str | None:
    """What the engine said of its memory at start, beside the plan's count; None when unread.

    `engine: KV cache 1 GiB (as asked) holds 524,288 tokens (planned 524,288), 1024.00× of
    512; weights loaded in 0.01 s; up in 2.59 s`.
    """
    got = view.figures
    if not got.get("kv_tokens") and not got.get("kv_cache_gib"):
        return None
    parts = []
    way = view.spec.get("way") or {}
    if got.get("kv_cache_gib") is not None:
        asked = " (as asked)" if got.get("kv_sized") == "explicit" else ""
        parts.append(f"KV cache {got['kv_cache_gib']:g} GiB{asked}")
    if got.get("kv_tokens") is not None:
        planned = way.get("kv_tokens")
        count = f"holds {got['kv_tokens']:,} tokens"
        if planned is not None:
            count += f" (planned {planned:,})"
        parts.append(count)
    if got.get("kv_concurrency") is not None:
        parts[-1] += f", {got['kv_concurrency']:.2f}× of {got.get('kv_for_tokens', 0):,}"
    text = "engine: " + " ".join(parts)
    if got.get("weights_gib") is not None:
        text += f"; weights {got['weights_gib']:.2f} GiB"
    if got.get("init_s") is not None:
        text += f"; up in {got['init_s']:.2f} s"
    return text


@dataclass(frozen=True)
class LoadRow:
    """A replica's engine as the replicas table shows it (`-` where it does not say): requests
    running/waiting, KV cache in use, and the last minute's p99 time to first token and
    inter-token latency; `minute` says the whole minute for the replica selected."""

    load: str
    kv: str
    ttft: str
    itl: str
    minute: str


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.1f}k" if value >= 10_000 else f"{value:.0f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else seconds_text(value)


def load_row(load: ReplicaLoad | None) -> LoadRow:
    """`3/2 · 41% · 120 ms · 25 ms`, and the minute: `last minute: 72 requests · time to first
    token p50 375 ms, p99 2.4 s · inter-token p50 18 ms, p99 25 ms · 254 tokens/s in, 58 out`."""
    if load is None:
        return LoadRow("-", "-", "-", "-", "")
    shown = "-"
    if load.running is not None or load.waiting is not None:
        shown = f"{load.running or 0}/{load.waiting or 0}"
    kv = "-" if load.kv_use is None else f"{load.kv_use:.0%}"
    latency = load.latency
    if latency is None:
        return LoadRow(shown, kv, "-", "-", "")
    parts = []
    if latency.requests is not None:
        parts.append(f"{latency.requests:.0f} requests")
    if latency.ttft_p99 is not None:
        parts.append(
            f"time to first token p50 {_seconds(latency.ttft_p50)}, p99 "
            f"{_seconds(latency.ttft_p99)}"
        )
    if latency.itl_p99 is not None:
        parts.append(
            f"inter-token p50 {_seconds(latency.itl_p50)}, p99 {_seconds(latency.itl_p99)}"
        )
    if latency.tokens_in_per_s is not None:
        parts.append(
            f"{_rate(latency.tokens_in_per_s)} tokens/s in, {_rate(latency.tokens_out_per_s)} out"
        )
    return LoadRow(
        load=shown,
        kv=kv,
        ttft=_seconds(latency.ttft_p99),
        itl=_seconds(latency.itl_p99),
        minute=("last minute: " + " · ".join(parts)) if parts else "",
    )
