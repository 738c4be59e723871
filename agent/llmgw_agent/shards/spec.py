"""The shard spec `shard.start` takes, checked and normalised (pure: values in, values out).

The console resolves everything (argv, env, ports, GPUs); the agent only
checks the shape, so a malformed spec is refused before anything starts.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional

from llmgw_agent import allowed_paths
from llmgw_agent.logcap import DEFAULT_LOG_MAX_BYTES
from llmgw_agent.op_args import OpError, arg, number_arg
from llmgw_agent.secret_names import is_secret_name
from llmgw_agent.shards.claims import valid_gpu_id

SHARD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
"""Used with `match`: `\\Z`, not `$`, so a trailing newline is refused too."""
DEFAULT_STOP_TIMEOUT_S = 30.0
DEFAULT_PORT_TIMEOUT_S = 600.0
ROLES = ("sidecar", "main")


def _bad(message: str) -> OpError:
    return OpError("bad_args", message)


def _command(index: int, raw: Any, last: bool) -> dict:
    if not isinstance(raw, dict):
        raise _bad("commands[{}] must be an object".format(index))
    where = "commands[{}]".format(index)
    name = raw.get("name") or "command{}".format(index)
    if not isinstance(name, str):
        raise _bad("{}.name must be a string".format(where))
    argv = raw.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise _bad("{}.argv must be a non-empty list of strings".format(where))
    env = raw.get("env") or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and "=" not in k for k, v in env.items()
    ):
        raise _bad("{}.env must map names to string values".format(where))
    secrets = sorted(key for key in env if is_secret_name(key))
    if secrets:
        # shard.json holds every command's env, readable on the node's disk:
        # a secret there is one a caller forgot to send apart.
        raise _bad(
            "{}.env names {}, a secret: send it in secret_env, which never reaches the disk".format(
                where, ", ".join(secrets)
            )
        )
    cwd = raw.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise _bad("{}.cwd must be a path".format(where))
    if cwd is not None:
        refusal = allowed_paths.refusal(cwd)
        if refusal:
            raise _bad("{}.cwd {}".format(where, refusal))
    port = raw.get("wait_for_port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
        raise _bad("{}.wait_for_port must be a TCP port number".format(where))
    if port is not None and not 1 <= port <= 65535:
        raise _bad("{}.wait_for_port must be between 1 and 65535".format(where))
    agent = raw.get("agent", False)
    if not isinstance(agent, bool):
        raise _bad("{}.agent must be true or false".format(where))
    role = raw.get("role") or ("main" if last else "sidecar")
    if role not in ROLES:
        raise _bad("{}.role must be sidecar or main".format(where))
    port_timeout_s = number_arg(raw, "port_timeout_s", DEFAULT_PORT_TIMEOUT_S, maximum=86400.0)
    return {
        "name": name,
        "argv": list(argv),
        "env": dict(env),
        "cwd": cwd,
        "wait_for_port": port,
        "port_timeout_s": float(port_timeout_s),
        "role": role,
        "agent": agent,
    }


MAX_CERT_CHARS = 16384
_PEM_CERT = "-----BEGIN CERTIFICATE-----"


def _health_cert(args: dict, health_url: Optional[str]) -> Optional[str]:
    """The certificate (public, PEM) an https health URL is pinned to, checked for shape."""
    cert = arg(args, "health_cert", (str,), None)
    if cert is None:
        return None
    if health_url is None or not health_url.startswith("https://"):
        raise _bad("health_cert pins an https:// health_url; give one")
    if _PEM_CERT not in cert or len(cert) > MAX_CERT_CHARS or "PRIVATE KEY" in cert:
        raise _bad("health_cert must be one PEM certificate (and never a key)")
    return cert


def normalise_spec(args: dict) -> dict:
    """A `shard.start` request checked and filled with defaults.

    Exactly one command is the main one and it comes last (sidecars first).

    Raises:
        OpError: `bad_args` with the first thing wrong.
    """
    replica = arg(args, "replica", (str,))
    if not replica:
        raise _bad("replica must not be empty")
    rank = arg(args, "rank", (int,))
    if rank < 0:
        raise _bad("rank must be 0 or more")
    shard_id: Optional[str] = arg(args, "shard_id", (str,), None)
    if shard_id is not None and not SHARD_ID.match(shard_id):
        raise _bad("shard_id may hold letters, digits, '.', '_' and '-' (128 at most)")
    gpus = arg(args, "gpus", (list,), [])
    if not all(isinstance(gpu, str) and valid_gpu_id(gpu) for gpu in gpus):
        raise _bad('gpus must be a list of GPU ids as strings ("0", "3", "1001")')
    if len(set(gpus)) != len(gpus):
        raise _bad("gpus names a GPU twice")
    raw_commands = arg(args, "commands", (list,))
    if not raw_commands:
        raise _bad("commands must hold at least the main command")
    commands: List[dict] = [
        _command(index, raw, index == len(raw_commands) - 1)
        for index, raw in enumerate(raw_commands)
    ]
    roles = [command["role"] for command in commands]
    if roles.count("main") != 1 or roles[-1] != "main":
        raise _bad("exactly one command is the main one, and it comes last")
    health_url = arg(args, "health_url", (str,), None)
    if health_url is not None and not health_url.startswith(("http://", "https://")):
        raise _bad("health_url must be an http:// URL")
    health_cert = _health_cert(args, health_url)
    log_max_bytes = number_arg(
        args, "log_max_bytes", DEFAULT_LOG_MAX_BYTES, minimum=8192, maximum=2**40
    )
    stop_timeout_s = number_arg(args, "stop_timeout_s", DEFAULT_STOP_TIMEOUT_S, maximum=3600.0)
    spec = arg(args, "spec", (dict,), {})
    # `real`: on a replayed node, run the commands as written, not the sim engine in their place
    # (the inventory named where this engine lives, so the operator wants it run).
    real = arg(args, "real", (bool,), False)
    return {
        "replica": replica,
        "rank": rank,
        "shard_id": shard_id,
        "gpus": list(gpus),
        "commands": commands,
        "health_url": health_url,
        "health_cert": health_cert,
        "log_max_bytes": int(log_max_bytes),
        "stop_timeout_s": float(stop_timeout_s),
        "spec": spec,
        "real": real,
    }
