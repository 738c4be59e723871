"""What the sim engine says of its KV transfer when it is a prefill or decode worker (pure).

A disaggregated service's worker names, once at start, the connector it was
given and the path its KV takes, read from the environment the launcher gave
it the way each transfer library reads it:

* NIXL over UCX (vLLM's NixlConnector, LMCache's channel, SGLang's `nixl`):
  `UCX_TLS` with `tcp` and no RDMA transport, or no `UCX_NET_DEVICES` at all
  (UCX then takes whatever it finds, TCP included): TCP; `rc` on the named
  devices: InfiniBand, or RoCE where `UCX_IB_GID_INDEX` is set; `cuda_ipc`
  alone: NVLink;
* Mooncake: `MC_FORCE_TCP=1`, or no device named (`MC_MS_FILTERS`, SGLang's
  `--disaggregation-ib-device`): TCP; else RDMA on the named devices.

The line's form is the sim's own (`KV transfer: <connector> <role> over
<kind> on <devices>`); `llmgw_core.fabric.kv_transfer` reads it. The real
libraries' start-up lines are not read yet (docs/disaggregation.md).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import Any, Dict, List, Optional, Tuple

MARKER = "KV transfer:"
"""What every transfer line starts with (the agent's `shard.nccl` keeps these lines too)."""


def _ucx_path(env: Dict[str, str]) -> tuple:
    transports = [t for t in env.get("UCX_TLS", "all").split(",") if t]
    devices = [d for d in env.get("UCX_NET_DEVICES", "").split(",") if d]
    rdma = any(t in transports for t in ("rc", "rc_x", "all"))
    if rdma and devices and "tcp" not in transports:
        return ("RoCE" if env.get("UCX_IB_GID_INDEX") else "InfiniBand"), devices
    if "cuda_ipc" in transports and "tcp" not in transports and not devices:
        return "NVLink", []
    return "TCP", devices or [env.get("NCCL_SOCKET_IFNAME", "").lstrip("=") or "any interface"]


def _mooncake_path(env: Dict[str, str], ib_devices: List[str]) -> tuple:
    devices = ib_devices or [d for d in env.get("MC_MS_FILTERS", "").split(",") if d]
    if env.get("MC_FORCE_TCP") == "1" or not devices:
        return "TCP", [env.get("NCCL_SOCKET_IFNAME", "").lstrip("=") or "any interface"]
    return "RDMA", devices


def transfer_lines(engine: dict, env: Dict[str, str]) -> List[str]:
    """The worker's transfer line, none for an engine doing both (`engine["pd"]` None)."""
    pd: Optional[dict] = engine.get("pd")
    if not pd:
        return []
    if pd["connector"] == "mooncake":
        kind, devices = _mooncake_path(env, list(pd.get("ib_devices") or []))
    else:
        kind, devices = _ucx_path(env)
    where = " on " + ",".join(devices) if devices else ""
    said = ["{} {} {} over {}{}".format(MARKER, pd["engine_name"], pd["role"], kind, where)]
    if pd["connector"] != "mooncake" and env.get("UCX_LOG_LEVEL", "").lower() in ("info", "debug"):
        said.append(ucx_endpoint_line(kind, devices))
    return said


def ucx_endpoint_line(kind: str, devices: List[str]) -> str:
    """UCX's own line for the endpoint NIXL opens to its peer, as UCX 1.13 prints it at
    `UCX_LOG_LEVEL=info`: its lanes, each a transport on a device."""
    lanes = ["self/memory", "cuda_copy/cuda"]
    if kind in ("InfiniBand", "RoCE"):
        lanes += ["rc_mlx5/{}".format(d if ":" in d else d + ":1") for d in devices]
    elif kind == "NVLink":
        lanes.append("cuda_ipc/cuda")
    else:
        lanes += ["tcp/{}".format(d) for d in devices if d != "any interface"] or ["tcp/lo"]
    return "[{:.6f}] [{}:{}:0]      ucp_worker.c:1877 UCX  INFO  ep_cfg[1]: tag({})".format(
        time.time(), socket.gethostname(), os.getpid(), " ".join(lanes)
    )


# ---- the hand-off, request by request ---------------------------------------------------

NVLINK_GBPS = 3600.0
"""One direction of an H100's NVLink (450 GB/s), in Gb/s: the KV's speed card to card."""
TCP_GBPS = 10.0
"""The management network's speed when nothing better is known (the advisor assumes it too)."""


def path_gbps(engine: dict, env: Dict[str, str], rails: Dict[str, float]) -> Optional[float]:
    """How fast this worker moves KV, in Gb/s, None for an engine doing both.

    Over rails UCX and Mooncake stripe a transfer evenly, so it goes as fast as
    the slowest rail named times their number: a degraded rail left in the
    device list slows every transfer (`rails`: each adapter's Gb/s as the
    replayed node carries it, the fabric test's own figure).
    """
    pd: Optional[dict] = engine.get("pd")
    if not pd:
        return None
    if pd["connector"] == "mooncake":
        kind, devices = _mooncake_path(env, list(pd.get("ib_devices") or []))
    else:
        kind, devices = _ucx_path(env)
    if kind == "NVLink":
        return NVLINK_GBPS
    speeds = [rails.get(d.split(":")[0]) for d in devices]
    known = [s for s in speeds if s]
    if kind == "TCP" or not known:
        return TCP_GBPS
    return min(known) * len(known)


def handoff_params(
    engine: dict, host: str, prompt_tokens: int, kv_bytes_per_token: int, gbps: float
) -> Dict[str, Any]:
    """What a prefill worker's answer carries for the decode worker (vLLM's NixlConnector's
    `kv_transfer_params`, with the sim's own `kv_bytes` and its side's speed added)."""
    pd = engine.get("pd") or {}
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": "sim-{}-{}".format(host, os.getpid()),
        "remote_block_ids": list(range(max(1, -(-prompt_tokens // 16)))),
        "remote_host": host,
        "remote_port": int(os.environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT") or 5600),
        "tp_size": int(pd.get("tp") or 1),
        "kv_bytes": prompt_tokens * kv_bytes_per_token,
        "sender_gbps": gbps,
    }


def receive_s(params: Dict[str, Any], own_gbps: float) -> Tuple[float, int, float]:
    """How long the decode worker waits for the prompt's KV: (seconds, bytes, Gb/s), at the
    slower of the two sides' paths."""
    moved = int(params.get("kv_bytes") or 0)
    sender = float(params.get("sender_gbps") or own_gbps)
    gbps = min(own_gbps, sender) if sender > 0 else own_gbps
    return (moved * 8 / (gbps * 1e9) if gbps > 0 else 0.0), moved, gbps


def received_line(moved: int, seconds: float, gbps: float) -> str:
    """The line a decode worker prints per request it received the KV of (the sim's own form,
    as NIXL's per-transfer figures would read)."""
    return "{} received {} bytes in {:.2f} ms ({:.1f} GB/s)".format(
        MARKER, moved, seconds * 1000, gbps / 8
    )


# ---- SGLang's bootstrap rooms --------------------------------------------------------------
#
# sglang-router sends a request to a prefill and a decode worker at once, with the prefill
# worker's `bootstrap_host`, `bootstrap_port` and a `bootstrap_room`: the decode worker finds
# the prefill worker by them and waits for that room's KV. The sim's workers meet in a
# directory every simulated node of this machine sees (they all run here), not over SGLang's
# bootstrap server: the demo's nodes share one loopback, where two prefill workers on two
# "nodes" may hold the same bootstrap port.

ROOMS_ENV = "LLMGW_SIM_ROOMS"
"""Where the sim's rooms are (else a private folder under the temporary directory)."""
ROOM_WAIT_S_ENV = "LLMGW_SIM_ROOM_WAIT_S"
"""How long a decode worker waits for its room's KV before it answers 500 (30 s by default)."""
_ROOM_LIMIT = 1 << 63


def bootstrap_of(body: object) -> Optional[Tuple[str, int, int]]:
    """A request's `(bootstrap_host, bootstrap_port, bootstrap_room)`; None when it carries
    none, or one that is not a host, a port and a room of 0 to 2**63 - 1."""
    if not isinstance(body, dict):
        return None
    host, port, room = (
        body.get("bootstrap_host"),
        body.get("bootstrap_port"),
        body.get("bootstrap_room"),
    )
    numbers = [v for v in (port, room) if isinstance(v, int) and not isinstance(v, bool)]
    if not isinstance(host, str) or not host or len(numbers) != 2:
        return None
    if not 0 < port < 65536 or not 0 <= room < _ROOM_LIMIT:
        return None
    return host, port, room


def rooms_dir() -> str:
    """The folder the sim's prefill and decode workers meet in (created private)."""
    import tempfile

    path = os.environ.get(ROOMS_ENV) or os.path.join(
        tempfile.gettempdir(), "llmgw-sim-rooms-{}".format(os.getuid())
    )
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _room_path(port: int, room: int) -> str:
    return os.path.join(rooms_dir(), "{}-{}.json".format(port, room))


ROOM_STALE_S = 600.0
"""A room older than this was never taken (its decode leg found no worker): cleared."""


def fill_room(port: int, room: int, params: Dict[str, Any]) -> None:
    """The prefill worker's side: the room's KV is ready (`handoff_params`), written whole;
    rooms left untaken for `ROOM_STALE_S` are cleared on the way."""
    import json

    stale = time.time() - ROOM_STALE_S
    with os.scandir(rooms_dir()) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < stale:
                    os.unlink(entry.path)
    path = _room_path(port, room)
    partial = path + ".part"
    with open(partial, "w") as handle:
        json.dump(params, handle)
    os.replace(partial, path)


def wait_room(port: int, room: int, timeout_s: float) -> Optional[Dict[str, Any]]:
    """The decode worker's side: the room's hand-off once its prefill worker filled it (the
    room then emptied); None when it did not within `timeout_s`."""
    import json

    path = _room_path(port, room)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with open(path) as handle:
                params = json.load(handle)
        except (OSError, ValueError):
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.005)
            continue
        with contextlib.suppress(OSError):
            os.unlink(path)
        return params if isinstance(params, dict) else {}
