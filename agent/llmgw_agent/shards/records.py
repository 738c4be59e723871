"""Shards on this node as their records say: judged, listed, stopped, drained, forgotten.

Each shard lives in `state_dir/shards/<shard_id>/`:

* `shard.json` — the spec it was started with, its token, the argv actually
  run (the sim engine in replay mode, unless `real`); written once, before it starts
  (`shards.start`);
* `supervisor.json` — pid, start ticks and boot id of its supervising process;
* `state.json` — phase, each command's pid/start ticks/exit, health; written by
  the supervisor (by an agent only once the supervisor is dead);
* `stop.json` — a stop request's timeout; `draining.json` — a drain's mark;
  `engine.log`, `engine.log.1`, `supervisor.log`.

Nothing lives in the agent's memory: any agent, started any time, judges the
same directory the same way, trusting only pid + start time + token.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional

from llmgw_agent import paths, proc_identity
from llmgw_agent.op_args import OpError
from llmgw_agent.shards import claims
from llmgw_agent.shards.spec import SHARD_ID

TERMINAL_PHASES = ("exited", "failed", "stopped")
_STARTUP_GRACE_S = 15.0
"""A shard without a recorded supervisor younger than this is still being started."""
_STOP_SLACK_S = 5.0
"""How much longer than the stop timeout the agent waits for the supervisor's own stop."""


def shards_dir() -> Path:
    """Where shard directories live (created on first use)."""
    return paths.state_subdir("shards")


def read_record(path: Path) -> dict:
    """A JSON record, or `{}` when it is missing or half-written."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def write_record(path: Path, record: dict) -> None:
    """Write a JSON record atomically (a reader sees the old or the new one, whole)."""
    temporary = path.with_name("{}.{}-{}.tmp".format(path.name, os.getpid(), threading.get_ident()))
    temporary.write_text(json.dumps(record, indent=1, sort_keys=True))
    os.replace(str(temporary), str(path))


def shard_directory(shard_id: str) -> Path:
    """The directory of an existing shard.

    Raises:
        OpError: `not_found` when there is no such shard here.
    """
    if not SHARD_ID.match(shard_id):
        raise OpError("not_found", "no shard {!r} on this node".format(shard_id))
    path = shards_dir() / shard_id
    if not (path / "shard.json").exists():
        raise OpError("not_found", "no shard {!r} on this node".format(shard_id))
    return path


def age_s(record: dict, monotonic_key: str, wall_key: str) -> float:
    """How long ago `record` was written, on the monotonic clock where it can be.

    CLOCK_MONOTONIC is one clock for every process of a boot and never jumps
    when the wall clock is stepped (NTP, `date -s`), so a record stamped with it
    in this boot ages truly. A record of another boot is infinitely old; one
    without the stamp (an older agent's) falls back on the wall clock.
    """
    stamped = record.get(monotonic_key)
    if stamped is not None and record.get("boot_id"):
        if record["boot_id"] != proc_identity.boot_id():
            return float("inf")
        return time.monotonic() - float(stamped)
    return time.time() - float(record.get(wall_key) or 0)


def claim_is_stale(holder: dict) -> bool:
    """Whether a GPU claim's holder is gone: its shard finished, replaced or never recorded.

    A claim younger than the start-up grace whose shard has no record yet is
    a start still under way, not a stale claim.
    """
    shard_id = holder.get("shard_id") or ""
    young = age_s(holder, "claimed_mono", "claimed_at") < _STARTUP_GRACE_S
    try:
        directory = shard_directory(shard_id)
    except OpError:
        return not young
    if read_record(directory / "shard.json").get("token") != holder.get("token"):
        return True
    return judge_shard(directory)["phase"] in TERMINAL_PHASES


def discard_shard(directory: Path, private: Optional[str]) -> None:
    """Remove a shard's folder and its private folder (when still this user's own folder)."""
    with contextlib.suppress(OSError):
        found = os.lstat(private) if private else None
        if found is not None and stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid():
            shutil.rmtree(str(private))
    shutil.rmtree(str(directory), ignore_errors=True)


def unwritable_reason(exc: OSError) -> str:
    """The sentence for a state directory that cannot be written (a full disk, mostly)."""
    return "the agent cannot write its state directory {}: {}".format(
        paths.state_dir(), exc.strerror or exc
    )


def finish_shard(directory: Path, shard: dict, phase: str, reason: str) -> dict:
    """Record a shard as over (when its supervisor cannot) and free its claims."""
    state = read_record(directory / "state.json")
    if state.get("phase") in TERMINAL_PHASES:
        return state
    # The claims go first: freeing them needs no space, recording the end does.
    claims.release(shard.get("gpus", []), shard.get("shard_id", ""))
    state.update(phase=phase, reason=reason, ended_at=time.time())
    try:
        write_record(directory / "state.json", state)
    except OSError as exc:
        state["reason"] = "{} (not recorded: {})".format(reason, unwritable_reason(exc))
    return state


def _live_commands(state: dict, token: str) -> List[dict]:
    return [
        command
        for command in state.get("commands", [])
        if command.get("exit_code") is None and proc_identity.judge(command, token) is None
    ]


def judge_shard(directory: Path) -> dict:
    """The shard as it really is: its record, with a dead supervisor judged dead.

    A shard whose supervisor and commands are all gone is recorded as failed
    and its claims are freed, so a crashed node does not hold cards forever.
    """
    shard = read_record(directory / "shard.json")
    state = read_record(directory / "state.json")
    supervisor = read_record(directory / "supervisor.json") or None
    token = shard.get("token", "")
    phase = state.get("phase", "starting")
    supervisor_alive = False
    reason = state.get("reason")
    if phase not in TERMINAL_PHASES:
        young = age_s(shard, "created_mono", "created_at") < _STARTUP_GRACE_S
        why = proc_identity.judge(supervisor, token)
        if why is None or (supervisor is None and young):
            supervisor_alive = True
        else:
            state = read_record(directory / "state.json")  # it may have just finished
            phase = state.get("phase", "starting")
            reason = state.get("reason")
            if phase not in TERMINAL_PHASES:
                if _live_commands(state, token):
                    reason = "its supervising process is gone ({}); the engine still runs".format(
                        why
                    )
                else:
                    state = finish_shard(
                        directory, shard, "failed", "its supervising process died: {}".format(why)
                    )
                    phase, reason = state["phase"], state.get("reason")
    commands = state.get("commands", [])
    main = next((c for c in commands if c.get("role") == "main"), {})
    log_bytes = sum(path.stat().st_size for path in directory.glob("engine.log*") if path.is_file())
    return {
        "shard_id": shard.get("shard_id", directory.name),
        "replica": shard.get("replica"),
        "rank": shard.get("rank"),
        "gpus": shard.get("gpus", []),
        "phase": phase,
        "reason": reason,
        "pid": (supervisor or {}).get("pid"),
        "start_ticks": (supervisor or {}).get("start_ticks"),
        "supervisor_alive": supervisor_alive,
        "main_pid": main.get("pid"),
        "started_at": shard.get("created_at"),
        "age_s": round(age_s(shard, "created_mono", "created_at"), 3),
        "running_at": state.get("running_at"),
        "ended_at": state.get("ended_at"),
        "exit_code": state.get("exit_code"),
        "killed": state.get("killed", False),
        "healthy": state.get("healthy"),
        "served": bool(state.get("served_at")),
        "health_url": shard.get("health_url"),
        "keepalive": shard.get("keepalive"),
        # The sim engine runs in its place (a replayed node's engine the inventory named is real).
        "replay": bool(shard.get("replay")) and not shard.get("real"),
        "log_bytes": log_bytes,
        "commands": [
            {
                "name": c.get("name"),
                "role": c.get("role"),
                "pid": c.get("pid"),
                "exit_code": c.get("exit_code"),
            }
            for c in commands
        ],
        "draining_since": read_record(directory / "draining.json").get("since"),
        "adapters": read_record(directory / "adapters.json").get("adapters"),
        "spec": shard.get("spec", {}),
    }


def shard_phase(shard_id: str) -> str:
    """The judged phase of one shard."""
    return judge_shard(shard_directory(shard_id))["phase"]


def list_shards() -> List[dict]:
    """Every shard in the state dir, judged, oldest first."""
    found = []
    for directory in shards_dir().iterdir():
        if (directory / "shard.json").exists():
            found.append(judge_shard(directory))
    return sorted(found, key=lambda shard: shard.get("started_at") or 0)


def terminate_groups(
    group_ids: List[int], is_alive: Callable[[int], bool], timeout_s: float
) -> bool:
    """SIGTERM each process group, SIGKILL whichever leader outlives `timeout_s`.

    Engines spawn workers (vLLM, SGLang, Ray), so whole groups are signalled;
    stragglers of a group whose leader is gone get SIGKILL at the end too.

    Returns:
        Whether SIGKILL was needed for a leader that ignored SIGTERM.
    """
    for group in group_ids:
        _signal_group(group, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(is_alive(group) for group in group_ids) and time.monotonic() < deadline:
        time.sleep(0.05)
    stubborn = [group for group in group_ids if is_alive(group)]
    for group in group_ids:
        _signal_group(group, signal.SIGKILL)
    return bool(stubborn)


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def stop_shard(shard_id: str, timeout_s: Optional[float]) -> dict:
    """Stop a shard: its supervisor does it (SIGTERM, then SIGKILL after the timeout).

    Where the supervisor is gone, the agent signals the recorded process groups
    itself. Claims are freed either way. Stopping a finished shard is a no-op.

    Returns:
        `{"shard_id", "phase", "exit_code", "killed"}`.
    """
    directory = shard_directory(shard_id)
    shard = read_record(directory / "shard.json")
    judged = judge_shard(directory)
    if judged["phase"] in TERMINAL_PHASES:
        return _stop_result(judged)
    timeout = shard.get("stop_timeout_s", 30.0) if timeout_s is None else timeout_s
    with contextlib.suppress(OSError):  # a full disk: the supervisor uses the shard's timeout
        write_record(directory / "stop.json", {"timeout_s": timeout, "requested_at": time.time()})
    supervisor = read_record(directory / "supervisor.json")
    if judged["supervisor_alive"] and supervisor.get("pid"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(supervisor["pid"]), signal.SIGTERM)
        deadline = time.monotonic() + timeout + _STOP_SLACK_S
        while time.monotonic() < deadline:
            if read_record(directory / "state.json").get("phase") in TERMINAL_PHASES:
                _wait_gone(supervisor, shard.get("token", ""), _STOP_SLACK_S)
                return _stop_result(judge_shard(directory))
            if proc_identity.judge(supervisor, shard.get("token", "")) is not None:
                break  # it died without finishing: the agent stops the engine itself
            time.sleep(0.05)
        timeout = 0.0
    token = shard.get("token", "")
    state = read_record(directory / "state.json")
    live = {int(c["pid"]): c for c in _live_commands(state, token)}
    killed = terminate_groups(
        sorted(live, reverse=True),
        lambda pid: proc_identity.judge(live[pid], token) is None,
        timeout,
    )
    if proc_identity.judge(supervisor, token) is None:
        _signal_group(int(supervisor["pid"]), signal.SIGKILL)
    state = read_record(directory / "state.json")
    state["killed"] = killed or state.get("killed", False)
    with contextlib.suppress(OSError):  # a full disk: finish_shard still frees the claims
        write_record(directory / "state.json", state)
    finish_shard(directory, shard, "stopped", "stopped on request (by the agent)")
    return _stop_result(judge_shard(directory))


def drain_shard(shard_id: str) -> dict:
    """Mark a shard draining: gateways take it out of rotation while its requests finish.

    The mark is a file of its own (`draining.json`), so it never races the
    supervisor's writes of `state.json`; it goes with the shard when it is forgotten.

    Returns:
        `{"shard_id", "draining_since"}` (the first mark's time when marked twice).
    """
    directory = shard_directory(shard_id)
    since = read_record(directory / "draining.json").get("since")
    if not isinstance(since, (int, float)):
        since = time.time()
        try:
            write_record(directory / "draining.json", {"since": since})
        except OSError as exc:
            raise OpError("failed", unwritable_reason(exc)) from None
    return {"shard_id": shard_id, "draining_since": since}


MAX_ADAPTERS = 256


def record_adapters(shard_id: str, adapters: list) -> dict:
    """Record the adapters a shard's engine holds now (`adapters.json`, beside its state: the
    supervisor never writes it). Each is `{name, source, lora_id?}`, names and paths as text.

    Raises:
        OpError: `bad_args` for an entry that is not such an object; `failed` when unwritable.
    """
    directory = shard_directory(shard_id)
    if len(adapters) > MAX_ADAPTERS:
        raise OpError("bad_args", "at most {} adapters".format(MAX_ADAPTERS))
    kept = []
    for entry in adapters:
        name, source, lora_id = entry.get("name"), entry.get("source"), entry.get("lora_id")
        if not isinstance(name, str) or not name or len(name) > 256:
            raise OpError("bad_args", "an adapter's name is a short text")
        if not isinstance(source, str) or len(source) > 4096:
            raise OpError("bad_args", "an adapter's source is a path or a Hub id")
        if lora_id is not None and (isinstance(lora_id, bool) or not isinstance(lora_id, int)):
            raise OpError("bad_args", "an adapter's lora_id is a whole number")
        origin = entry.get("origin")
        if origin is not None and (not isinstance(origin, str) or len(origin) > 4096):
            raise OpError("bad_args", "an adapter's origin is a Hub id")
        kept.append({"name": name, "source": source, "lora_id": lora_id, "origin": origin})
    try:
        write_record(directory / "adapters.json", {"adapters": kept, "at": time.time()})
    except OSError as exc:
        raise OpError("failed", unwritable_reason(exc)) from None
    return {"shard_id": shard_id, "adapters": kept}


def _wait_gone(recorded: dict, token: str, timeout_s: float) -> None:
    """Wait (a little) until a recorded process has exited."""
    deadline = time.monotonic() + timeout_s
    while proc_identity.judge(recorded, token) is None and time.monotonic() < deadline:
        time.sleep(0.01)


def _stop_result(judged: dict) -> dict:
    return {
        "shard_id": judged["shard_id"],
        "phase": judged["phase"],
        "exit_code": judged["exit_code"],
        "killed": judged["killed"],
    }


def forget_shard(shard_id: str) -> dict:
    """Remove a finished shard's directory (its logs go with it).

    Raises:
        OpError: `busy` while the shard is still starting or running.
    """
    directory = shard_directory(shard_id)
    judged = judge_shard(directory)
    if judged["phase"] not in TERMINAL_PHASES:
        raise OpError("busy", "shard {} is {}; stop it first".format(shard_id, judged["phase"]))
    private = read_record(directory / "shard.json").get("private_dir")
    shutil.rmtree(str(directory))
    discard_shard(directory, private)
    return {"shard_id": shard_id, "forgotten": True}
