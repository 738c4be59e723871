"""Where the agent keeps its state, and where replay reads from.

The variables that say where things are (the state folder, the replay
directory) live here, so discovery, supervision and the sim engine agree on
them; a variable that steers one module only is defined beside it
(`LLMGW_CPU_ONLY` in discovery, `LLMGW_SHARD_TOKEN` in `proc_identity`).
"""

from __future__ import annotations

import os
from pathlib import Path

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Optional

STATE_ENV = "LLMGW_AGENT_STATE"
REPLAY_ENV = "LLMGW_AGENT_REPLAY"

PRIVATE_UMASK = 0o077
"""The agent's umask (set at every start): what it writes, its engines' logs and
shard records included, is its user's alone. The nodes are shared."""
TIGHTENED_NOTE = ".tightened"
"""Left in a state folder the agent found open to others and closed: doctor reports it."""

_private = set()  # the state folders this process has made sure of


def state_dir() -> Path:
    """The agent's state directory (shards, claims, logs), created on first use.

    `LLMGW_AGENT_STATE` wins (the demo fleet gives each simulated node its own);
    else `$XDG_STATE_HOME/llmgw`, else `~/.local/state/llmgw`.
    """
    explicit = os.environ.get(STATE_ENV)
    if explicit:
        path = Path(explicit)
    else:
        xdg = os.environ.get("XDG_STATE_HOME")
        base = Path(xdg) if xdg else Path.home() / ".local" / "state"
        path = base / "llmgw"
    if str(path) not in _private:
        _make_private(path)
    return path


def _make_private(path: Path) -> None:
    """Create `path` as 0700, or close an existing one other users could read.

    A folder found open (an older agent's, or made by hand) is closed with
    everything in it, and a note is left for doctor to say so: what was
    written before may have been read.
    """
    path.mkdir(parents=True, mode=0o700, exist_ok=True)
    was = path.stat().st_mode & 0o777
    if was & 0o077:
        try:
            _close(path, was)
        except OSError:
            return  # not ours to change: doctor reports the mode as it is
    _private.add(str(path))


def _close(path: Path, was: int) -> None:
    import json
    import time

    os.chmod(str(path), 0o700)
    for root, folders, files in os.walk(str(path)):
        for name in folders + files:
            full = os.path.join(root, name)
            try:
                mode = os.lstat(full).st_mode
                if not os.path.islink(full) and mode & 0o077:
                    os.chmod(full, mode & 0o7700)  # the owner's bits only
            except OSError:
                continue
    note = {"was": "{:04o}".format(was), "at": time.time()}
    (path / TIGHTENED_NOTE).write_text(json.dumps(note))


def tightened(path: Path) -> Optional[dict]:
    """The note left when the agent closed `path` to other users, else None."""
    import json

    try:
        note = json.loads((path / TIGHTENED_NOTE).read_text())
    except (OSError, ValueError):
        return None
    return note if isinstance(note, dict) else None


def replay_dir(explicit: Optional[str] = None) -> Optional[Path]:
    """The capture directory discovery reads instead of the hardware, or None.

    An explicit `--replay DIR` wins over `LLMGW_AGENT_REPLAY`.
    """
    chosen = explicit or os.environ.get(REPLAY_ENV)
    return Path(chosen) if chosen else None


def state_subdir(name: str) -> Path:
    """A folder of the state directory (`shards`, `claims` …), created on first use."""
    path = state_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def sim_usage_dir() -> Path:
    """Where sim engines record the memory they hold on simulated cards.

    Each running sim engine writes `<pid>.json` here; discovery in replay mode
    adds the memory of the ones whose process is still alive to its cards.
    """
    return state_subdir("sim-usage")
