"""What the sim engine says while it starts, shaped like each real engine (pure).

The console reads these lines for progress only (readiness is the HTTP health
check), and reads NCCL's INFO lines to tell the fabric from a TCP fallback:
`NET/IB` + `Using network IB` when NCCL was given adapters (`NCCL_IB_HCA`, not
`NCCL_IB_DISABLE=1`), `NET/Socket` + `Using network Socket` otherwise,
`MNNVL 1` when multi-node NVLink was switched on (`NCCL_MNNVL_ENABLE=1`), and
each local rank's ring channel to the next, over the path NCCL takes between
those two cards on the node's topology (`card_link`).
"""

from __future__ import annotations

import os
import time
from typing import Dict, List, Optional, Sequence, Tuple

GIB = 1024**3
MIB = 1024**2
_OVERHEAD_GIB = 1.5
"""CUDA context, activations and graphs: what a card holds besides weights and KV."""
_KV_BYTES_PER_TOKEN = 128 * 1024
"""A mid-sized model's KV bytes per token, when the sim knows nothing better."""


def kv_bytes_per_token(engine: dict) -> float:
    """The KV one token takes in this engine, its cache's dtype counted."""
    return _KV_BYTES_PER_TOKEN * float(engine.get("kv_bytes_ratio") or 1.0)


Line = Tuple[str, str]
"""(text, terminator): `\n` for a line, `\r` for a progress bar redrawn in place."""


def memory_plan(engine: dict, card_mib: int, weights_bytes: int) -> dict:
    """How the sim engine's memory divides on each of its cards.

    Args:
        engine: `parse_engine_argv` output.
        card_mib: memory of one card.
        weights_bytes: the whole model's weights (split over tp × pp cards).

    Returns:
        `{used_mib, weights_gib, kv_gib, kv_tokens}` per card.
    """
    cards = max(1, engine["tp"] * engine["pp"])
    weights_gib = weights_bytes / cards / GIB
    fraction = engine.get("memory_fraction")
    per_token = kv_bytes_per_token(engine)
    if fraction is None:  # llama.cpp takes what it needs, not a fraction
        context = engine.get("context_tokens") or 4096
        kv_gib = context * per_token / GIB / cards
        used_gib = weights_gib + kv_gib + 0.5
    else:
        used_gib = card_mib / 1024.0 * float(fraction)
        kv_gib = max(0.0, used_gib - weights_gib - _OVERHEAD_GIB)
    kv_tokens = int(kv_gib * GIB * cards / per_token)
    return {
        "used_mib": int(min(used_gib * 1024, card_mib)),
        "weights_gib": weights_gib,
        "kv_gib": kv_gib,
        "kv_tokens": kv_tokens,
    }


CPU_BLOCK_TOKENS = 128
"""vLLM's CPU backend pages 128 tokens."""


def cpu_kv_plan(engine: dict, kv_space_gib: int, weights_bytes: int, node_gib: float) -> dict:
    """vLLM's CPU backend: the KV cache `VLLM_CPU_KVCACHE_SPACE` asks for, on one NUMA node.

    The sim has no model, so its tokens come from its one bytes-a-token figure, in
    whole pages of 128 tokens as the real engine counts them.
    """
    per_token = kv_bytes_per_token(engine)
    tokens = int(kv_space_gib * GIB / per_token) // CPU_BLOCK_TOKENS * CPU_BLOCK_TOKENS
    weights_gib = weights_bytes / max(1, engine["tp"]) / GIB
    return {
        "used_mib": 0,
        "weights_gib": weights_gib,
        "kv_gib": float(kv_space_gib),
        "kv_tokens": tokens,
        "device": "CPU",
        "node_gib": node_gib,
    }


def _adapters(hca_list: str) -> List[Tuple[str, str]]:
    """`=mlx5_0:1,mlx5_1` → [("mlx5_0", "1"), ("mlx5_1", "1")]; an exclusion list names none."""
    if hca_list.startswith("^"):
        return []
    adapters = []
    for item in hca_list.lstrip("=").split(","):
        name, _, rest = item.strip().partition(":")
        if name:
            adapters.append((name, rest.split(":")[0] or "1"))
    return adapters


_CHANNELS = 2
"""Channels printed per rank pair. Real NCCL builds 16 to 32 on NVLink boxes and
prints a line for each; two show the same path at a tenth of the log."""


def card_link(env: Dict[str, str], cell: Optional[str], mnnvl: bool) -> str:
    """What NCCL 2.21 prints after `via` for two local ranks' cards (`src/transport/p2p.cc`).

    `NCCL_P2P_DISABLE=1` sends every pair through host memory; in a multi-node
    NVLink communicator every P2P pair says `MNNVL`; otherwise P2P (by cuMem
    handles, the default since 2.19) over NVLink or PCIe switches (`PIX`,
    `PXB`) and host memory past a host bridge — NCCL's `NCCL_P2P_LEVEL`
    default on Intel and ARM hosts, which the demo's PCIe box is.
    """
    if env.get("NCCL_P2P_DISABLE", "0") == "1":
        return "SHM/direct/direct"
    if mnnvl:
        return "P2P/MNNVL"
    if cell is not None and (cell.startswith("NV") or cell in ("PIX", "PXB")):
        return "P2P/CUMEM"
    return "SHM/direct/direct"


def channel_line(src: int, src_card: int, dst: int, dst_card: int, via: str, channel: int) -> str:
    """One channel line as NCCL 2.21 prints it (SHM's has no connection index)."""
    if via.startswith("SHM/"):
        return "Channel {:02d} : {}[{}] -> {}[{}] via {}".format(
            channel, src, src_card, dst, dst_card, via
        )
    if via.startswith("NET/"):
        return "Channel {:02d}/0 : {}[{}] -> {}[{}] [send] via {}".format(
            channel, src, src_card, dst, dst_card, via
        )
    return "Channel {:02d}/0 : {}[{}] -> {}[{}] via {}".format(
        channel, src, src_card, dst, dst_card, via
    )


def nccl_lines(
    env: Dict[str, str],
    host: str,
    pid: int,
    engine: dict,
    cards: Sequence[str] = (),
    nvlink: Optional[Dict[str, Dict[str, str]]] = None,
) -> List[str]:
    """NCCL's INFO lines for this node's ranks, when `NCCL_DEBUG` asks for them.

    Args:
        env: the engine's environment (NCCL's variables).
        host, pid: what NCCL's line prefix names (each local rank is pid + its index).
        engine: `parse_engine_argv` output (tp, pp, nnodes, node_rank).
        cards: the node's cards given to the engine, local rank order.
        nvlink: the node's card-to-card topology (`nvidia-smi topo -m` cells).
    """
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        return []
    interface = env.get("NCCL_SOCKET_IFNAME", "eth0").lstrip("=^").split(",")[0] or "eth0"
    oob = "{}:127.0.0.1<0>".format(interface)
    lines = ["Bootstrap : Using " + oob, "NCCL version 2.21.5+cuda12.4"]
    adapters = _adapters(env.get("NCCL_IB_HCA", ""))
    use_ib = bool(adapters) and env.get("NCCL_IB_DISABLE", "0") != "1"
    if use_ib:
        layer = "RoCE" if env.get("NCCL_IB_GID_INDEX") else "IB"
        listed = " ".join(
            "[{}]{}:{}/{}".format(index, name, port, layer)
            for index, (name, port) in enumerate(adapters)
        )
        lines += ["NET/IB : Using {} ; OOB {}".format(listed, oob), "Using network IB"]
        lines += [
            "NET/IB : GPU Direct RDMA Enabled for HCA {} '{}'".format(index, name)
            for index, (name, _port) in enumerate(adapters)
        ]
    else:
        if env.get("NCCL_IB_DISABLE", "0") != "1":
            lines.append("NET/IB : No device found.")
        lines += ["NET/Socket : Using [0]" + oob, "Using network Socket"]
    nnodes = max(1, engine["nnodes"])
    ranks = max(1, engine["tp"] * engine["pp"])
    local_ranks = max(1, ranks // nnodes)
    first = engine["node_rank"] * local_ranks
    mnnvl = nnodes > 1 and env.get("NCCL_MNNVL_ENABLE") == "1"
    said = [lines[0], lines[1]]  # once per process; the rest per rank
    per_rank = lines[2:]
    device = [int(c) if str(c).isdigit() else i for i, c in enumerate(cards)]
    device += list(range(len(device), local_ranks))
    # The prefix's `[n]` is the CUDA device (counted inside CUDA_VISIBLE_DEVICES);
    # a channel line's `rank[n]` is the card's NVML index, as the topology counts.
    out = ["{}:{}:{} [0] NCCL INFO {}".format(host, pid, pid, line) for line in said]
    for local in range(local_ranks):
        rank = first + local
        prefix = "{}:{}:{} [{}] NCCL INFO ".format(host, pid + local, pid + local, local)
        rank_lines = list(per_rank)
        rank_lines.append(
            "comm 0x7f00{:08x} rank {} nRanks {} nNodes {} localRanks {} localRank {} "
            "MNNVL {}".format(pid, rank, ranks, nnodes, local_ranks, local, 1 if mnnvl else 0)
        )
        if ranks > 1:
            peer = (rank + 1) % ranks
            peer_local = peer - first
            if 0 <= peer_local < local_ranks:
                cell = (nvlink or {}).get(str(device[local]), {}).get(str(device[peer_local]))
                via = card_link(env, cell, mnnvl)
                peer_card = device[peer_local]
            else:  # the ring leaves the node
                via = "P2P/MNNVL" if mnnvl else ("NET/IB/0/GDRDMA" if use_ib else "NET/Socket/0")
                peer_card = 0
            rank_lines += [
                channel_line(rank, device[local], peer, peer_card, via, channel)
                for channel in range(_CHANNELS)
            ]
        rank_lines.append(
            "comm 0x7f00{:08x} rank {} nranks {} - Init COMPLETE".format(pid, rank, ranks)
        )
        out += [prefix + line for line in rank_lines]
    return out


def _stamp() -> str:
    return time.strftime("%m-%d %H:%M:%S")


def loading_lines(engine: dict, plan: dict, shard_count: int) -> List[Line]:
    """The lines printed while weights load, spread over the load time by the caller."""
    kind = engine["kind"]
    lines: List[Line] = []
    if kind == "vllm":
        for done in range(shard_count + 1):
            lines.append(
                (
                    "Loading safetensors checkpoint shards: {:3d}% Completed | {}/{} "
                    "[00:0{}<00:00, 1.00it/s]".format(
                        done * 100 // shard_count, done, shard_count, done
                    ),
                    "\n",
                )
            )
    elif kind == "sglang":
        lines.append(("[{}] Load weight begin. avail mem={:.2f} GB".format(_stamp(), 79.0), "\n"))
        for done in range(shard_count + 1):
            lines.append(
                (
                    "Loading safetensors checkpoint shards: {:3d}% Completed | {}/{}".format(
                        done * 100 // shard_count, done, shard_count
                    ),
                    "\r",
                )
            )
    elif kind == "llama.cpp":
        lines.append(("llama_model_loader: loaded meta data from {}".format(engine["model"]), "\n"))
        for done in range(shard_count + 1):
            lines.append(
                ("load_tensors: loading model tensors {}%".format(done * 100 // shard_count), "\n")
            )
    return lines


def lora_loaded_line(name: str, path: str) -> str:
    """vLLM's line for an adapter it loaded, at start (`--lora-modules`) or at runtime."""
    return "INFO {} Loaded new LoRA adapter: name '{}', path '{}'".format(_stamp(), name, path)


def lora_removed_line(name: str) -> str:
    """vLLM's line for an adapter it unloaded."""
    return "INFO {} Removed LoRA adapter: name '{}'".format(_stamp(), name)


def ready_lines(engine: dict, plan: dict, load_s: float, bound: str) -> List[str]:
    """The lines printed once loaded: memory, KV cache, and the server coming up."""
    kind = engine["kind"]
    scheme = "https" if engine.get("ssl_certfile") else "http"
    context = engine.get("context_tokens") or 32768
    if kind == "vllm":
        # vLLM 0.32's wording (its CPU build's, measured; "GPU" where it says "CPU"): the KV
        # cache's size and the concurrency it holds on one line, then the engine's init, then
        # its own server (it binds the socket itself: no uvicorn "running on" line).
        device = plan.get("device", "GPU")
        lines = ["INFO {} Loading weights took {:.2f} seconds".format(_stamp(), load_s * 0.8)]
        if device == "CPU":  # its CPU worker says neither the weights' GiB nor "Available"
            lines.append(
                "INFO {} Explicitly set ({:.1f}/{:.2f}) GiB for KV cache on node 0.".format(
                    _stamp(), plan["kv_gib"], plan["node_gib"]
                )
            )
        else:
            lines += [
                "INFO {} Model loading took {:.4f} GiB memory and {:.6f} seconds".format(
                    _stamp(), plan["weights_gib"], load_s
                ),
                "INFO {} Available KV cache memory: {:.2f} GiB".format(_stamp(), plan["kv_gib"]),
            ]
        lines += [
            "INFO {} {} KV cache size: {:,} tokens, Maximum concurrency for {:,} tokens per "
            "request: {:.2f}x".format(
                _stamp(), device, plan["kv_tokens"], context, plan["kv_tokens"] / max(1, context)
            ),
            "INFO {} init engine (profile, create kv cache, warmup model) took {:.2f} s".format(
                _stamp(), load_s * 0.2
            ),
        ]
        if engine["serves_http"]:
            if engine.get("runtime_lora"):
                lines.append(
                    "WARNING {} LoRA dynamic loading & unloading is enabled in the API server. "
                    "This should ONLY be used for local development!".format(_stamp())
                )
            lines += [lora_loaded_line(a["name"], a["path"]) for a in engine.get("adapters") or ()]
            lines += [
                "INFO {} Starting vLLM server on {}://{}".format(_stamp(), scheme, bound),
                "INFO:     Started server process [{}]".format(os.getpid()),
                "INFO:     Waiting for application startup.",
                "INFO:     Application startup complete.",
            ]
        return lines
    if kind == "sglang":
        lines = [
            "[{}] Load weight end. type=sim, avail mem={:.2f} GB, mem usage={:.2f} GB.".format(
                _stamp(), plan["kv_gib"] + _OVERHEAD_GIB, plan["weights_gib"]
            ),
            "[{}] KV Cache is allocated. #tokens: {}, KV size: {:.2f} GB".format(
                _stamp(), plan["kv_tokens"], plan["kv_gib"]
            ),
            "[{}] Memory pool end. avail mem={:.2f} GB".format(_stamp(), _OVERHEAD_GIB),
        ]
        if engine["serves_http"]:
            lines += [
                "INFO:     Uvicorn running on {}://{} (Press CTRL+C to quit)".format(scheme, bound),
                "[{}] The server is fired up and ready to roll!".format(_stamp()),
            ]
        return lines
    return [
        "llama_context: n_ctx = {}".format(engine.get("context_tokens") or 4096),
        "llama_kv_cache: size = {:.2f} MiB".format(plan["kv_gib"] * 1024),
        "llama_context: flash_attn = {}".format(
            "enabled" if engine.get("flash_attn", True) else "disabled"
        ),
        "load_tensors: offloaded {} layers to GPU".format(engine.get("gpu_layers") or "all"),
        "main: model loaded",
        "main: server is listening on {}://{}".format(scheme, bound),
        "srv  update_slots: all slots are idle",
    ]
