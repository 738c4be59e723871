"""Fabric verdicts this node keeps, per peer node and adapter, so every console sees them.

A fabric test runs from a console, but what it found belongs to the nodes:
the console records each rail's verdict on both ends (`fabric.record`), and
discovery reports them in the facts (`rail_verdicts`), so any console that
connects later leaves a failed rail out of `NCCL_IB_HCA` too. A rail's newest
verdict replaces the older one: a later passing test restores it.

Stored as one JSON file, `<state>/fabric/rails.json`, keyed `peer/adapter`,
written whole to a temporary file and renamed, under a lock file (two
consoles may record at once).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from pathlib import Path

from llmgw_agent import paths
from llmgw_agent.op_args import OpError, arg

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

FILE_NAME = "rails.json"
VERDICTS = ("pass", "warn", "fail")
MAX_ROWS = 256
"""At most this many rails in one `fabric.record` (a node has a few dozen)."""
MAX_KEPT = 4096
"""The newest verdicts kept per node; older ones are dropped."""

_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}(:[0-9]{1,2})?$")


def _folder() -> Path:
    return paths.state_subdir("fabric")


def _number(row: Dict[str, Any], key: str, maximum: float) -> Optional[float]:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OpError("bad_args", "rail {!r} must be a number".format(key))
    if not 0 <= value <= maximum:
        raise OpError("bad_args", "rail {!r} must be between 0 and {}".format(key, maximum))
    return float(value)


def checked_row(row: Any, now: float) -> Dict[str, Any]:
    """One rail's verdict, every field checked (names reach file keys and screens).

    Raises:
        OpError: `bad_args` naming the field that is wrong.
    """
    if not isinstance(row, dict):
        raise OpError("bad_args", "each rail is an object with peer, adapter and verdict")
    peer = arg(row, "peer", (str,))
    if not _NODE_NAME.match(peer):
        raise OpError("bad_args", "peer {!r} is not a node name".format(peer))
    adapter = arg(row, "adapter", (str,))
    if not _ADAPTER_NAME.match(adapter):
        raise OpError("bad_args", "adapter {!r} is not an adapter name".format(adapter))
    verdict = arg(row, "verdict", (str,))
    if verdict not in VERDICTS:
        raise OpError("bad_args", "verdict must be one of {}".format(", ".join(VERDICTS)))
    rail = row.get("rail")
    if rail is not None and (isinstance(rail, bool) or not isinstance(rail, int) or rail < 0):
        raise OpError("bad_args", "rail 'rail' must be a position (0, 1, ...)")
    measured_at = _number(row, "measured_at", 1e11)
    return {
        "peer": peer,
        "adapter": adapter,
        "rail": rail,
        "verdict": verdict,
        "ratio": _number(row, "ratio", 100.0),
        "measured_gbps": _number(row, "measured_gbps", 1e6),
        "rated_gbps": _number(row, "rated_gbps", 1e6),
        "measured_at": measured_at if measured_at is not None else now,
    }


def _read(path: Path) -> Dict[str, Dict[str, Any]]:
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: a fresh start, never a crash
    return kept if isinstance(kept, dict) else {}


def record_verdicts(args: Dict[str, Any]) -> Dict[str, Any]:
    """Keep the verdicts of `args["rails"]`, each replacing the last one for its peer and adapter.

    Returns:
        `{"recorded": n, "rails": [every verdict now kept]}`.

    Raises:
        OpError: `bad_args` for a missing or malformed rail (nothing is kept then).
    """
    rows = arg(args, "rails", (list,))
    if len(rows) > MAX_ROWS:
        raise OpError("bad_args", "at most {} rails at once".format(MAX_ROWS))
    now = time.time()
    checked = [checked_row(row, now) for row in rows]
    folder = _folder()
    path = folder / FILE_NAME
    with _locked(folder / (FILE_NAME + ".lock")):
        kept = _read(path)
        for row in checked:
            kept["{}/{}".format(row["peer"], row["adapter"])] = row
        newest = sorted(kept.items(), key=lambda item: item[1].get("measured_at") or 0.0)
        kept = dict(newest[-MAX_KEPT:])
        temporary = folder / "{}.{}.tmp".format(FILE_NAME, os.getpid())
        temporary.write_text(json.dumps(kept, sort_keys=True))
        os.replace(str(temporary), str(path))
    return {"recorded": len(checked), "rails": list(kept.values())}


def read_verdicts() -> List[Dict[str, Any]]:
    """Every verdict this node keeps (what discovery reports as `rail_verdicts`)."""
    kept = _read(_folder() / FILE_NAME)
    return [row for row in kept.values() if isinstance(row, dict)]


@contextlib.contextmanager
def _locked(lock_path: Path):
    """Hold an exclusive lock on `lock_path` (POSIX); without fcntl, the rename alone."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(str(lock_path), "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
