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

import os
import socket
import time
from typing import Dict, List, Optional

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
