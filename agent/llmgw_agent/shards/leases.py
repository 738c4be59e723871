"""Leases: who may change a service now, kept in this node's state and lapsing unless renewed.

`state_dir/leases/<name>.json` holds `{name, holder, token, since, expires_at}`.
Taking, renewing and releasing all hold one lock (`flock` on `.lock`), so two
operators racing for a service cannot both win it. A lease not renewed by
`expires_at` (this node's clock) is free to take: its holder died, or lost
its way to this node. The protocol also gives back, when a connection ends,
every lease taken on it (`Server.shutdown`): a holder killed outright frees
its service as soon as its SSH connection closes, and at the latest when the
lease lapses.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import time
from pathlib import Path

from llmgw_agent import paths
from llmgw_agent.op_args import OpError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterator, List, Optional

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_HOLDER_CHARS = 200


def leases_dir() -> Path:
    """Where the lease files live (created on first use)."""
    return paths.state_subdir("leases")


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    fd = os.open(str(leases_dir() / ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def checked_name(name: str) -> str:
    """A service name that can name a lease file.

    Raises:
        OpError: `bad_args` otherwise.
    """
    if not _NAME.match(name):
        raise OpError(
            "bad_args",
            "name must start with a letter or digit and hold letters, digits, . _ - (64 at most)",
        )
    return name


def _path(name: str) -> Path:
    return leases_dir() / "{}.json".format(checked_name(name))


def _read(name: str) -> Optional[dict]:
    try:
        record = json.loads(_path(name).read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        return {}  # unreadable: written whole by `_write`, so never ours to honour
    return record if isinstance(record, dict) else {}


def _write(name: str, record: dict) -> None:
    path = _path(name)
    temporary = path.with_name(".{}.{}.tmp".format(path.name, os.getpid()))
    temporary.write_text(json.dumps(record))
    os.replace(str(temporary), str(path))


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _live(record: Optional[dict], now: float) -> bool:
    if not record:
        return False
    expires = record.get("expires_at")
    return isinstance(expires, (int, float)) and expires > now


def held_sentence(record: dict, now: float) -> str:
    """Who holds a service and since when, and how long its lease runs unless renewed."""
    return "service {} is held by {} since {} (its lease runs {:.0f} s more unless renewed)".format(
        record.get("name"),
        record.get("holder") or "an unnamed holder",
        _utc(float(record.get("since") or 0)),
        max(0.0, float(record.get("expires_at") or 0) - now),
    )


def _public(record: dict) -> dict:
    return {k: record.get(k) for k in ("name", "holder", "since", "expires_at")}


def take(name: str, holder: str, ttl_s: float) -> dict:
    """Take the lease of `name` for `ttl_s` seconds.

    Returns:
        `{name, holder, since, expires_at, token}`: the token renews and releases it.

    Raises:
        OpError: `held`, naming the holder and since when, while another holds it.
    """
    now = time.time()
    holder = "".join(c for c in holder if c.isprintable())[:MAX_HOLDER_CHARS]
    with _locked():
        current = _read(name)
        if _live(current, now):
            raise OpError("held", held_sentence(current or {}, now))
        record = {
            "name": name,
            "holder": holder,
            "token": secrets.token_hex(16),
            "since": now,
            "expires_at": now + ttl_s,
        }
        _write(name, record)
    return dict(_public(record), token=record["token"])


def renew(name: str, token: str, ttl_s: float) -> dict:
    """Extend our lease of `name` by `ttl_s` from now.

    Raises:
        OpError: `lost`, when the lease is no longer ours (released, or lapsed and taken).
    """
    now = time.time()
    with _locked():
        current = _read(name)
        if not current or current.get("token") != token:
            why = held_sentence(current, now) if _live(current, now) else "nobody holds it"
            raise OpError("lost", "the lease of service {} is no longer ours: {}".format(name, why))
        current["expires_at"] = now + ttl_s
        _write(name, current)
    return _public(current)


def release(name: str, token: str) -> dict:
    """Give the lease of `name` back (a lease someone else holds now is left alone)."""
    with _locked():
        current = _read(name)
        ours = bool(current) and current.get("token") == token
        if ours:
            with contextlib.suppress(FileNotFoundError):
                _path(name).unlink()
    return {"name": name, "released": ours}


def list_leases() -> List[dict]:
    """Every lease held now (lapsed ones left out)."""
    now = time.time()
    found = []
    for path in sorted(leases_dir().glob("*.json")):
        name = path.name[: -len(".json")]
        if not _NAME.match(name):
            continue
        record = _read(name)
        if _live(record, now):
            found.append(_public(record or {}))
    return found


DIRECTIONS = ("out", "in")


def _counts_path() -> Path:
    return leases_dir() / "scale-events.json"


def count_scale(name: str, direction: str) -> dict:
    """Count one scale event of service `name` (kept past any lease: a Prometheus counter).

    Raises:
        OpError: `bad_args` for a direction that is neither `out` nor `in`.
    """
    if direction not in DIRECTIONS:
        raise OpError("bad_args", "direction must be out or in")
    with _locked():
        counts = scale_counts()
        service = counts.setdefault(name, {})
        service[direction] = int(service.get(direction, 0)) + 1
        path = _counts_path()
        temporary = path.with_name(".{}.{}.tmp".format(path.name, os.getpid()))
        temporary.write_text(json.dumps(counts))
        os.replace(str(temporary), str(path))
    return {"name": name, "direction": direction, "total": service[direction]}


def scale_counts() -> dict:
    """Every service's scale events so far: `{name: {out: n, in: n}}`."""
    try:
        counts = json.loads(_counts_path().read_text())
    except (FileNotFoundError, ValueError):
        return {}
    if not isinstance(counts, dict):
        return {}
    return {
        str(name): {d: int(n) for d, n in by.items() if d in DIRECTIONS and isinstance(n, int)}
        for name, by in counts.items()
        if isinstance(by, dict) and _NAME.match(str(name))
    }
