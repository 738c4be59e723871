"""The Ray cluster vLLM joins nodes through, started so that no other user of a node can use it.

The nodes are shared, and a Ray cluster left as `ray start` makes it is
anyone's: its port takes jobs from whoever connects (CVE-2023-48022: anyone
who can reach it runs code as the user who started it), and its default
`/tmp/ray` is a folder every user may write in, so another user can replace
its `session_latest` link and its lock files under it. So every Ray process a
replica starts:

* keeps its files in a private folder the agent makes for the shard
  (`PRIVATE_DIR_PLACEHOLDER`, 0700, short: a Unix socket path holds at most
  107 bytes). Ray makes its own `--temp-dir` open to all (0777) whatever it
  is given, so the private folder is that temp dir's parent, which no one
  else can enter;
* says the address the other nodes reach it at (`--node-ip-address`, the
  node's management address, the same as `VLLM_HOST_IP`), with no dashboard;
* demands Ray's own token (Ray 2.52 on): `RAY_AUTH_MODE=token` on every
  process, and `RAY_AUTH_TOKEN`, made per replica, in the shard's
  `secret_env` only (never an argv, a record or a log).

A Ray without token authentication is not started at all: `refusal` says why
and what to do instead. Pure, but for `new_token`'s randomness.
"""

from __future__ import annotations

import secrets

from llmgw_core.engines.programs import at_least
from llmgw_core.engines.spec import LaunchNode, LaunchRequest, host_port
from llmgw_core.errors import BadInput

DEFAULT_RAY_PORT = 6379

REPORTED_AS = "ray"
"""The name a node's agent reports Ray's version under (`facts.engines`)."""

TOKEN_AUTH_SINCE = (2, 52)
"""Ray authenticates its cluster with a token from 2.52.0 (`RAY_AUTH_MODE=token`)."""

AUTH_MODE_VARIABLE = "RAY_AUTH_MODE"
TOKEN_VARIABLE = "RAY_AUTH_TOKEN"
ADDRESS_VARIABLE = "RAY_ADDRESS"

PRIVATE_DIR_PLACEHOLDER = "@LLMGW_PRIVATE_DIR@"
"""Where a command takes a folder only its user can enter: the agent makes one for the shard
and writes its path here (`agent/llmgw_agent/shards/start.py` reads the same text)."""

TEMP_DIR = PRIVATE_DIR_PLACEHOLDER + "/ray"
"""Ray's `--temp-dir`: Ray opens it to everyone, its private parent keeps everyone out."""

MP_WAY_OUT = "serve with executor: mp, vLLM's own multiprocessing, which needs no Ray"


def new_token() -> str:
    """A replica's Ray token: 256 random bits, as hex."""
    return secrets.token_hex(32)


def auth_env() -> dict[str, str]:
    """The variable every Ray process of a replica is given (the token itself is secret)."""
    return {AUTH_MODE_VARIABLE: "token"}


def driver_env(head: LaunchNode, port: int) -> dict[str, str]:
    """What `vllm serve` needs to join the head's cluster rather than start its own.

    Without `RAY_ADDRESS`, `ray.init()` looks for a cluster in the default
    `/tmp/ray`, finds none there (ours lives in the private folder) and starts
    a second, local one.
    """
    return {**auth_env(), ADDRESS_VARIABLE: host_port(head.address, port)}


def head_argv(ray: tuple[str, ...], node: LaunchNode, port: int) -> tuple[str, ...]:
    """`ray start --head` on rank 0: the cluster's port, its address, its private folder."""
    return (
        *ray,
        "start",
        "--head",
        "--port",
        str(port),
        "--node-ip-address",
        node.address,
        "--temp-dir",
        TEMP_DIR,
        "--include-dashboard=false",
        "--block",
    )


def worker_argv(
    ray: tuple[str, ...], head: LaunchNode, node: LaunchNode, port: int
) -> tuple[str, ...]:
    """`ray start --address HEAD:PORT` on the other ranks, each with its own private folder."""
    return (
        *ray,
        "start",
        "--address",
        host_port(head.address, port),
        "--node-ip-address",
        node.address,
        "--temp-dir",
        TEMP_DIR,
        "--block",
    )


def refusal(request: LaunchRequest, mp_available: bool) -> BadInput | None:
    """Why a replica that joins its nodes through Ray cannot be started, or None when it can.

    Every node must report a Ray with token authentication: an older one
    ignores `RAY_AUTH_MODE` and listens to anyone, and a version the node did
    not report may be one of those.

    Args:
        request: the launch, whose vLLM joins its nodes through Ray.
        mp_available: the installed vLLM has its own multi-node mode (the way out).
    """
    risk = "anyone who can reach its port runs code as you (CVE-2023-48022)"
    if not mp_available:
        fix = (
            "install vLLM 0.12 or later and " + MP_WAY_OUT + ", or install Ray 2.52 or later "
            "on every node"
        )
    else:
        fix = MP_WAY_OUT + ", or install Ray 2.52 or later on every node"
    for node in request.ranked_nodes:
        if node.ray_version is None:
            return BadInput(
                f"{node.name} did not report its Ray version, and a Ray before 2.52 has no "
                f"authentication: {risk}",
                fix,
            )
        if at_least(node.ray_version, TOKEN_AUTH_SINCE) is not True:
            return BadInput(
                f"Ray {node.ray_version} on {node.name} has no authentication: {risk}", fix
            )
    return None
