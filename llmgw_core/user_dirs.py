"""Where llmgw keeps things of the operator's own on this machine (XDG base directories)."""

from __future__ import annotations

import os
from pathlib import Path


def state_home() -> Path:
    """`$XDG_STATE_HOME`, else `~/.local/state` (the console's error log, the kept-up demo)."""
    return Path(os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state"))
