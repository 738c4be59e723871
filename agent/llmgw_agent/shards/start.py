"""Starting a shard on this node: its record, its claims, its private folder, its supervisor.

`start_shard` writes the shard's records (`shards.records` lays them out and
judges them), claims its GPUs, and starts its supervising process detached
from the SSH session, answering once that process can take a stop.

A command whose argv names `PRIVATE_DIR_PLACEHOLDER` (Ray's `--temp-dir`) is
given a short folder only this user can enter, made for the shard, recorded
as `private_dir` and removed when the shard is forgotten.

Secrets (`secret_env`) reach the shard through its supervisor's environment
only: never an argv, a record or a log.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import List, Optional

from llmgw_agent import keepalive, paths, proc_identity
from llmgw_agent.op_args import OpError
from llmgw_agent.shards import claims, memfiles
from llmgw_agent.shards.records import (
    claim_is_stale,
    discard_shard,
    finish_shard,
    shards_dir,
    unwritable_reason,
    write_record,
)
from llmgw_agent.shards.spec import normalise_spec

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_SUPERVISOR_APPEAR_S = 10.0
PRIVATE_DIR_PLACEHOLDER = "@LLMGW_PRIVATE_DIR@"
"""`llmgw_core.engines.ray_cluster`'s: replaced in a command's argv by the shard's private folder."""
PRIVATE_DIR_MAX_CHARS = 39
"""Ray's longest socket is 68 characters below the folder (`/ray/session_<date>_<pid>/sockets/
plasma_store`) and a Unix socket path holds 107 bytes: a longer folder fails Ray's start."""
_SHORTEST_SECRET = 8


def agent_command(*args: str) -> List[str]:
    """The argv that runs this same agent again (from a directory or a zipapp)."""
    import llmgw_agent

    root = os.path.dirname(os.path.dirname(os.path.abspath(llmgw_agent.__file__)))
    boot = (
        "import sys; sys.path.insert(0, {!r}); "
        "from llmgw_agent.__main__ import main; sys.exit(main())".format(root)
    )
    flags = ["-S"] if sys.flags.no_site else []
    return [sys.executable or "python3", *flags, "-c", boot, *args]


def _new_shard_id(replica: str, rank: int) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", replica)[:96].strip("-.") or "shard"
    return "{}-r{}-{}".format(stem, rank, secrets.token_hex(3))


def _run_argv(argv: List[str], replay: Optional[str]) -> List[str]:
    """The argv to execute: the real one, or in replay mode the sim engine standing in."""
    if not replay:
        return argv
    from llmgw_agent.sim.engine.args import engine_kind

    kind = engine_kind(argv)
    if kind is None:
        return argv
    return agent_command("sim-engine", "--as", kind, "--", *argv)


def start_shard(args: dict, replay: Optional[str]) -> dict:
    """Claim the spec's GPUs and start its supervisor, detached from this session.

    Returns:
        `{"shard_id", "pid", "phase": "starting"}` (pid: the supervisor's).

    Raises:
        OpError: `bad_args`, `exists`, `busy` (naming the GPU and its holder), `failed`.
    """
    spec = normalise_spec(args)
    secret_env = secret_environment(args)
    refused = memfiles.refusal(secret_env)
    if refused:
        raise OpError("unavailable", refused)
    _refuse_secrets_on_argv(spec["commands"], secret_env)
    shard_id = spec["shard_id"] or _new_shard_id(spec["replica"], spec["rank"])
    directory = shards_dir() / shard_id
    try:
        directory.mkdir()
    except FileExistsError:
        raise OpError(
            "exists", "shard {} already exists on this node; forget it first".format(shard_id)
        ) from None
    token = secrets.token_hex(16)
    method, method_reason = keepalive.keepalive_method()
    private = None
    if any(PRIVATE_DIR_PLACEHOLDER in arg for c in spec["commands"] for arg in c["argv"]):
        try:
            private = make_private_dir()
        except OpError:
            discard_shard(directory, None)
            raise
    for command in spec["commands"]:
        # `agent: true`: argv is this agent's own subcommand (`front …`), run by this agent.
        run = agent_command(*command["argv"]) if command["agent"] else command["argv"]
        if private is not None:
            run = [arg.replace(PRIVATE_DIR_PLACEHOLDER, str(private)) for arg in run]
        command["run_argv"] = _run_argv(run, None if spec["real"] else replay)
    record = dict(
        spec,
        shard_id=shard_id,
        token=token,
        private_dir=str(private) if private is not None else None,
        replay=replay,
        created_at=time.time(),
        created_mono=time.monotonic(),
        boot_id=proc_identity.boot_id(),
        keepalive=method,
        keepalive_reason=method_reason,
    )
    # The record exists before the claims, so a racing start judges our claims live.
    try:
        write_record(directory / "shard.json", record)
        write_record(directory / "state.json", {"phase": "starting", "commands": []})
    except OSError as exc:
        discard_shard(directory, record["private_dir"])
        raise OpError("failed", unwritable_reason(exc)) from None
    holder = {
        "shard_id": shard_id,
        "replica": spec["replica"],
        "rank": spec["rank"],
        "token": token,
        "claimed_at": time.time(),
        "claimed_mono": time.monotonic(),
        "boot_id": proc_identity.boot_id(),
    }
    try:
        claims.acquire(spec["gpus"], holder, claim_is_stale)
    except OpError:
        discard_shard(directory, record["private_dir"])
        raise
    except OSError as exc:
        discard_shard(directory, record["private_dir"])
        raise OpError("failed", unwritable_reason(exc)) from None
    try:
        pid = _spawn_supervisor(directory, shard_id, token, replay, method, secret_env)
    except OSError as exc:
        finish_shard(directory, record, "failed", "could not start the supervisor: {}".format(exc))
        raise OpError("failed", "could not start shard {}: {}".format(shard_id, exc)) from exc
    except OpError as exc:
        finish_shard(directory, record, "failed", exc.message)
        raise
    return {"shard_id": shard_id, "pid": pid, "phase": "starting"}


def _refuse_secrets_on_argv(commands: List[dict], secret_env: dict) -> None:
    """Refuse a command that names one of the shard's secrets on its command line.

    Every user of the node reads argv (`ps`, `/proc/<pid>/cmdline`); a secret
    reaches a command through its environment alone.
    """
    for command in commands:
        for key, value in secret_env.items():
            if len(value) >= _SHORTEST_SECRET and any(value in arg for arg in command["argv"]):
                raise OpError(
                    "bad_args",
                    "{}'s command line holds the secret {}, and every user of the node can "
                    "read a command line: pass it in secret_env only".format(command["name"], key),
                )


def make_private_dir() -> Path:
    """A new folder only this user can enter, short enough for Ray's sockets below it.

    In the state folder when its path is short, else in `$TMPDIR` or `/tmp`:
    `mkdtemp` makes it 0700 under a name no one can guess, in a folder whose
    sticky bit (or closed mode) keeps other users from moving it away.

    Raises:
        OpError: `failed` when no such folder can be made.
    """
    state = paths.state_dir() / "p"
    for base in (state, Path(os.environ.get("TMPDIR") or "/tmp"), Path("/tmp")):
        if not base.is_absolute() or len(str(base)) + 15 > PRIVATE_DIR_MAX_CHARS:
            continue  # 15: `/llmgw-` and mkdtemp's 8 characters
        try:
            if base == state:
                base.mkdir(mode=0o700, exist_ok=True)
            mode = os.stat(str(base)).st_mode
            if stat.S_ISDIR(mode) and (not mode & 0o022 or mode & stat.S_ISVTX):
                return Path(tempfile.mkdtemp(prefix="llmgw-", dir=str(base)))
        except OSError:
            continue
    raise OpError(
        "failed",
        "no folder of {} characters or fewer that only this user can enter could be made in "
        "the state folder, $TMPDIR or /tmp (Ray's sockets must fit below it)".format(
            PRIVATE_DIR_MAX_CHARS
        ),
    )


def secret_environment(args: dict) -> dict:
    """`shard.start`'s `secret_env`: variables for the shard's processes, kept off the disk.

    They arrived on the SSH channel's stdin; they go into the supervisor's
    environment (and so its commands'), never into the shard's records.

    Raises:
        OpError: `bad_args` when it is not a map of variable names to strings.
    """
    secret_env = args.get("secret_env") or {}
    if not isinstance(secret_env, dict) or not all(
        isinstance(k, str) and _ENV_NAME.match(k) and isinstance(v, str)
        for k, v in secret_env.items()
    ):
        raise OpError("bad_args", "secret_env must map variable names to string values")
    return dict(secret_env)


def _spawn_supervisor(
    directory: Path,
    shard_id: str,
    token: str,
    replay: Optional[str],
    method: Optional[str],
    secret_env: Optional[dict] = None,
) -> int:
    env = dict(os.environ)
    # Secrets reach the shard through the supervisor's environment only: never
    # its argv, shard.json or a log.
    env.update(secret_env or {})
    env[paths.STATE_ENV] = str(paths.state_dir())
    # The token too: every user reads a command line, only ours `/proc/<pid>/environ`,
    # which still proves the supervisor ours once it has taken the variable out.
    env[proc_identity.TOKEN_ENV] = token
    if replay:
        env[paths.REPLAY_ENV] = replay
    argv = keepalive.launch_prefix(method, shard_id) + agent_command("supervise", str(directory))
    with open(str(directory / "supervisor.log"), "ab") as log:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(directory),
            env=env,
            close_fds=True,
            start_new_session=True,
        )
    # Reap it when it ends (this agent may live longer than the shard).
    threading.Thread(target=process.wait, daemon=True).start()
    identity = proc_identity.identity(process.pid)
    # Answer only once the supervisor has its signal handlers (it then writes
    # supervisor.json): a stop sent earlier would kill it before it could stop
    # its engine.
    deadline = time.monotonic() + _SUPERVISOR_APPEAR_S
    while not (directory / "supervisor.json").exists():
        if process.poll() is not None:
            raise OpError(
                "failed",
                "the supervising process of {} exited at once ({}): {}".format(
                    shard_id, process.returncode, _last_line(directory / "supervisor.log")
                ),
            )
        if time.monotonic() > deadline:
            write_record(directory / "supervisor.json", identity)
            break
        time.sleep(0.005)
    return process.pid


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no output"
    return lines[-1] if lines else "no output"
