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
    path.mkdir(parents=True, exist_ok=True)
    return path


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
