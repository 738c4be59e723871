"""`all_reduce_perf` (nccl-tests) across nodes, started from one of them.

Opt-in, before a big launch: one all_reduce over every card of a replica's
nodes shows what the fabric gives NCCL itself, with NCCL's own INFO lines
saying which transport it took. The console reads the output (one parser,
in the core) and judges it against the slowest node's links.

Run with Open MPI's launcher from the node it is asked on:
`mpirun -np N×G -H a:G,b:G --bind-to none -x NCCL_DEBUG=INFO -x NCCL_… \
all_reduce_perf -b MIN -e MAX -f 2 -g 1`. Only `NCCL_*` variables pass.

In replay mode (a simulated node) nothing is launched: the output is
written in nccl-tests' own layout, with figures the simulated adapters of
this node allow (the slowest rail bounds every ring) and NCCL lines like
those of the sim engine (IB with the adapters named, Socket without).
"""

from __future__ import annotations

import shutil
import threading
import time
from typing import Any, Dict, List, Optional

from llmgw_agent.fabric.run import CappedOutput, start_tool, wait_or_stop
from llmgw_agent.op_args import OpError, arg, number_arg

ALL_REDUCE = "all_reduce_perf"
LAUNCHER = "mpirun"
DEFAULT_MIN_BYTES = 8
DEFAULT_MAX_BYTES = 1024**3
OUTPUT_LIMIT_BYTES = 1024 * 1024
SOCKET_GBPS = 12.0
"""What NCCL's Socket transport carries between simulated nodes (a 25 GbE management link)."""
NCCL_EFFICIENCY = 0.97
"""The share of the links' speed a large simulated all_reduce reaches."""
HALF_SPEED_BYTES = 16 * 1024**2
"""The simulated message size at which an all_reduce reaches half its peak."""


def _token(text: str) -> bool:
    """A plain word for argv or an environment value; never an option (a leading `-`)."""
    return (
        bool(text)
        and not text.startswith("-")
        and all(ch.isascii() and (ch.isalnum() or ch in "._:-=,^%/") for ch in text)
    )


def _options(args: Dict[str, Any]) -> Dict[str, Any]:
    hosts = arg(args, "hosts", (list,))
    if len(hosts) < 1 or not all(isinstance(h, str) and _token(h) for h in hosts):
        raise OpError("bad_args", "hosts must be a list of host names or addresses")
    env = arg(args, "env", (dict,), {})
    for key, value in env.items():
        if not (
            key.startswith("NCCL_") and _token(key) and isinstance(value, str) and _token(value)
        ):
            raise OpError("bad_args", "env may hold only NCCL_* variables with plain values")
    return {
        "hosts": hosts,
        "gpus_per_node": int(number_arg(args, "gpus_per_node", 8, 1, 64)),
        "min_bytes": int(number_arg(args, "min_bytes", DEFAULT_MIN_BYTES, 1, 2**40)),
        "max_bytes": int(number_arg(args, "max_bytes", DEFAULT_MAX_BYTES, 1, 2**40)),
        "timeout_s": float(number_arg(args, "timeout_s", 600.0, 1.0, 7200.0)),
        "env": dict(env),
    }


def all_reduce_argv(options: Dict[str, Any]) -> List[str]:
    """The `mpirun … all_reduce_perf` command line."""
    gpus = options["gpus_per_node"]
    argv = [LAUNCHER, "-np", str(gpus * len(options["hosts"]))]
    argv += ["-H", ",".join("{}:{}".format(host, gpus) for host in options["hosts"])]
    argv += ["--bind-to", "none", "-x", "NCCL_DEBUG=INFO"]
    for key, value in sorted(options["env"].items()):
        argv += ["-x", "{}={}".format(key, value)]
    argv += [ALL_REDUCE, "-b", str(options["min_bytes"]), "-e", str(options["max_bytes"])]
    return [*argv, "-f", "2", "-g", "1"]


def all_reduce(
    args: Dict[str, Any],
    emit: Any = None,
    cancelled: Optional[threading.Event] = None,
    replay: Optional[str] = None,
) -> Dict[str, Any]:
    """Run all_reduce_perf across `hosts`; returns `{argv, exit_code, output, simulated}`."""
    options = _options(args)
    argv = all_reduce_argv(options)
    if replay is not None:
        return {
            "argv": argv,
            "exit_code": 0,
            "output": simulated_output(options, replay),
            "simulated": True,
        }
    for tool in (ALL_REDUCE, LAUNCHER):
        if shutil.which(tool) is None:
            raise OpError(
                "unavailable",
                "{} is not installed on this node (nccl-tests built with MPI)".format(tool),
            )
    cancelled = cancelled or threading.Event()
    proc = start_tool(argv, LAUNCHER)
    output = CappedOutput(proc.stdout, OUTPUT_LIMIT_BYTES)
    stopped = wait_or_stop(proc, cancelled, time.monotonic() + options["timeout_s"])
    return {
        "argv": argv,
        "exit_code": proc.returncode,
        "output": output.text(),
        "stopped": stopped,
        "simulated": False,
    }


# --- replay ------------------------------------------------------------------------


def _hca_names(env: Dict[str, str]) -> Optional[List[str]]:
    """`=mlx5_0:1,mlx5_1` -> names; None when unset; [] when IB is switched off."""
    if env.get("NCCL_IB_DISABLE") == "1":
        return []
    listed = env.get("NCCL_IB_HCA")
    if listed is None:
        return None
    if listed.startswith("^"):
        return []
    return [item.split(":")[0] for item in listed.lstrip("=").split(",") if item]


def _node_gbps(options: Dict[str, Any], replay: str) -> tuple:
    """(Gb/s one simulated node puts on the network, adapter names used)."""
    from llmgw_agent.fabric.replay import replay_adapters

    adapters = replay_adapters(replay)
    wanted = _hca_names(options["env"])
    used = [
        a
        for name, a in sorted(adapters.items())
        if (wanted is None or name in wanted) and a.get("state") in (None, "ACTIVE")
    ]
    if not used:
        return SOCKET_GBPS, []
    return min(float(a["sim_gbps"]) for a in used) * len(used), [a["name"] for a in used]


def simulated_output(options: Dict[str, Any], replay: str) -> str:
    """nccl-tests' all_reduce_perf output for the simulated fabric of this node."""
    hosts, gpus = options["hosts"], options["gpus_per_node"]
    nodes, ranks = len(hosts), len(hosts) * gpus
    node_gbps, used = _node_gbps(options, replay)
    peak_algbw = node_gbps / 8 * NCCL_EFFICIENCY
    if nodes > 1:
        peak_algbw *= nodes / (2.0 * (nodes - 1))
    lines = [
        "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0".format(options["min_bytes"], options["max_bytes"]),
        "#",
        "# Using devices",
    ]
    for rank in range(ranks):
        lines.append(
            "#  Rank {:2d} Group  0 Pid {:6d} on {:>10} device {:2d} [0000:{:02x}:00] NVIDIA H100 80GB HBM3".format(
                rank, 4000 + rank, hosts[rank // gpus], rank % gpus, 0x18 + rank % gpus
            )
        )
    lines += _nccl_lines(hosts[0], used, nodes, ranks, gpus)
    lines += [
        "#",
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    ]
    busbw_sum = 0.0
    count = 0
    size = max(4, options["min_bytes"])
    while size <= options["max_bytes"]:
        algbw = peak_algbw * size / (size + HALF_SPEED_BYTES)
        busbw = algbw * 2 * (ranks - 1) / ranks
        time_us = size / (algbw * 1e9) * 1e6 if algbw > 0 else 0.0
        shown = "{:8.1f}".format(time_us) if time_us < 10000 else "{:8d}".format(int(time_us))
        cells = "{} {:7.2f} {:7.2f}      0".format(shown, algbw, busbw)
        lines.append(
            "{:>12} {:>13}     float     sum      -1 {} {}".format(size, size // 4, cells, cells)
        )
        busbw_sum += busbw
        count += 1
        size *= 2
    lines += [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : {:.4g} ".format(busbw_sum / max(1, count)),
        "#",
    ]
    return "\n".join(lines) + "\n"


def _nccl_lines(host: str, used: List[str], nodes: int, ranks: int, gpus: int) -> List[str]:
    prefix = "{}:4000:4001 [0] NCCL INFO ".format(host)
    lines = ["NCCL version 2.21.5+cuda12.4"]
    if used:
        listed = " ".join("[{}]{}:1/IB".format(i, name) for i, name in enumerate(used))
        lines += [
            prefix + "NET/IB : Using {} [RO]; OOB eno1:127.0.0.1<0>".format(listed),
            prefix + "Using network IB",
        ]
        via = "NET/IB/0/GDRDMA"
    else:
        lines += [
            prefix + "NET/IB : No device found.",
            prefix + "NET/Socket : Using [0]eno1:127.0.0.1<0>",
            prefix + "Using network Socket",
        ]
        via = "NET/Socket/0"
    lines.append(
        prefix
        + "comm 0x7f0000001000 rank 0 nRanks {} nNodes {} localRanks {} localRank 0 MNNVL 0".format(
            ranks, nodes, gpus
        )
    )
    if nodes > 1:
        lines.append(
            prefix + "Channel 00/0 : {}[0] -> 0[0] [receive] via {}".format(ranks - gpus, via)
        )
    return lines
