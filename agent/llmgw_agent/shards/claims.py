"""GPU claims: one file per GPU, created atomically, so no card is given twice.

`state_dir/claims/<gpu id>` is created by `link` from a file already
written (exclusive, as `O_CREAT | O_EXCL`, and never seen half-written);
whoever creates it holds the card until it is removed. Two consoles (or two
requests of one) racing for a card cannot both win.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional

from llmgw_agent import paths
from llmgw_agent.op_args import OpError

_GPU_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def claims_dir() -> Path:
    """Where the claim files live (created on first use)."""
    return paths.state_subdir("claims")


_held = threading.local()


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Hold the node's claims lock (reentrant in one thread; exclusive across processes).

    Taking over a stale claim is read, judge, remove, create: without the lock
    two starters could both judge it stale, and the second would remove the
    claim the first had just made, and both would win the card. A release
    takes it too, so it never removes a claim made after it read its own.
    """
    if getattr(_held, "depth", 0):
        _held.depth += 1
        try:
            yield
        finally:
            _held.depth -= 1
        return
    fd = os.open(str(claims_dir() / ".lock"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _held.depth = 1
        yield
    finally:
        _held.depth = 0
        os.close(fd)


def valid_gpu_id(gpu: str) -> bool:
    """Whether a GPU id can name a claim file (`0`, `3`, `1001`, `MIG-…`)."""
    return bool(_GPU_ID.match(gpu))


def read_claim(gpu: str) -> Optional[dict]:
    """The holder recorded in a claim, `{}` while unreadable, None when unclaimed."""
    try:
        text = (claims_dir() / gpu).read_text()
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(text)
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe(gpu: str, holder: dict) -> str:
    if not holder:
        return "GPU {} is held by a claim that cannot be read".format(gpu)
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("claimed_at", 0)))
    return "GPU {} is held by shard {} (replica {}, rank {}) since {}".format(
        gpu, holder.get("shard_id"), holder.get("replica"), holder.get("rank"), since
    )


def _try_create(gpu: str, holder: dict) -> bool:
    """Create the claim whole, or not at all: written to a private file, then linked.

    `link` fails when the name exists, as `O_EXCL` does, and the claim never
    exists half-written (a full disk fails the write before the claim exists).
    """
    directory = claims_dir()
    temporary = directory / ".{}.{}-{}.tmp".format(gpu, os.getpid(), threading.get_ident())
    try:
        with open(str(temporary), "w") as handle:
            handle.write(json.dumps(holder))
        try:
            os.link(str(temporary), str(directory / gpu))
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def acquire(gpus: List[str], holder: dict, is_stale: Callable[[dict], bool]) -> None:
    """Claim every GPU in `gpus` for `holder`, or none of them.

    A claim whose holder `is_stale` (its shard is dead) is removed and taken.

    Raises:
        OpError: `busy`, naming the first GPU held and who holds it.
    """
    taken: List[str] = []
    with _locked():
        for gpu in sorted(set(gpus)):
            if _try_create(gpu, holder):
                taken.append(gpu)
                continue
            current = read_claim(gpu)
            if current is not None and _stale(gpu, current, is_stale):
                _remove(gpu)
                if _try_create(gpu, holder):
                    taken.append(gpu)
                    continue
                current = read_claim(gpu)
            release(taken, holder["shard_id"])
            raise OpError("busy", _describe(gpu, current or {}))


def _stale(gpu: str, holder: dict, is_stale: Callable[[dict], bool]) -> bool:
    if not holder:
        # Claims are linked whole: an unreadable one was never ours to keep (an
        # older agent's half-written file, or a stray one).
        return True
    return is_stale(holder)


def _remove(gpu: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        (claims_dir() / gpu).unlink()


def release(gpus: List[str], shard_id: str) -> None:
    """Free the claims on `gpus` that `shard_id` holds (others' claims are left alone)."""
    with _locked():
        for gpu in gpus:
            holder = read_claim(gpu)
            if holder is not None and holder.get("shard_id") == shard_id:
                _remove(gpu)


def list_claims() -> List[dict]:
    """Every claim held: `{gpu, shard_id, replica, rank, claimed_at}`, by GPU id."""
    held = []
    for path in sorted(claims_dir().iterdir()):
        if path.name.startswith("."):
            continue  # a claim being written
        holder = read_claim(path.name)
        if holder is None:
            continue
        held.append(
            {
                "gpu": path.name,
                "shard_id": holder.get("shard_id"),
                "replica": holder.get("replica"),
                "rank": holder.get("rank"),
                "claimed_at": holder.get("claimed_at"),
            }
        )
    return held
