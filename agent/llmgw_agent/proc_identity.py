"""Who a pid really is: start time, state and token, read from /proc.

A pid alone is not an identity: after a process dies its number is reused.
Within one boot, (pid, start time in clock ticks) is unique; a token in the
command line or the environment proves it is ours. A zombie counts as dead.
"""

from __future__ import annotations

from typing import Optional

TOKEN_ENV = "LLMGW_SHARD_TOKEN"
"""Every process a shard starts carries its token in this environment variable."""


def _stat_fields(pid: int) -> Optional[list]:
    try:
        with open("/proc/{}/stat".format(pid)) as handle:
            text = handle.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return text[text.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (field 22), or None if gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def process_state(pid: int) -> Optional[str]:
    """The one-letter state (`R`, `S`, `Z` …), or None when there is no such process."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def boot_id() -> str:
    """This boot's id (start times only compare within one boot)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def identity(pid: int) -> dict:
    """The record that lets a later agent recognise this process: pid, start ticks, boot."""
    return {"pid": pid, "start_ticks": start_ticks(pid), "boot_id": boot_id()}


def carries_token(pid: int, token: str) -> bool:
    """Whether the token is in the process's command line or its environment."""
    wanted_arg = token.encode()
    wanted_env = "{}={}".format(TOKEN_ENV, token).encode()
    for name, wanted in (("cmdline", wanted_arg), ("environ", wanted_env)):
        try:
            with open("/proc/{}/{}".format(pid, name), "rb") as handle:
                if wanted in handle.read().split(b"\0"):
                    return True
        except OSError:
            continue
    return False


def judge(recorded: Optional[dict], token: str) -> Optional[str]:
    """Why the recorded process is not alive, or None when it is (same boot, pid, start, token).

    Args:
        recorded: an `identity()` record (None: never recorded).
        token: the shard's token, which the process must carry.
    """
    if not recorded or not recorded.get("pid"):
        return "no process was recorded"
    pid = int(recorded["pid"])
    if recorded.get("boot_id") and recorded["boot_id"] != boot_id():
        return "the node rebooted since pid {} was started".format(pid)
    state = process_state(pid)
    if state is None:
        return "pid {} is gone".format(pid)
    if state in ("Z", "X", "x"):
        return "pid {} is a zombie".format(pid)
    if start_ticks(pid) != recorded.get("start_ticks"):
        return "pid {} now belongs to another process".format(pid)
    if not carries_token(pid, token):
        return "pid {} does not carry this shard's token".format(pid)
    return None
