"""The download watcher: how many bytes a directory tree holds, and when they last moved.

The console's startup timeout runs from the last time a node's download moved,
so a slow mirror is not a failure and a stalled one is.
"""

from __future__ import annotations

import os
import stat
import threading
import time

from llmgw_agent import allowed_paths
from llmgw_agent.op_args import Arg, OpError
from llmgw_agent.ops import Op, operation

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, Tuple


def tree_size(path: str) -> Tuple[int, int, Optional[float]]:
    """(bytes, files, newest modification time) of the regular files under `path`.

    Symbolic links are not followed (a Hugging Face snapshot links into its
    blobs, which are counted once where they are); files that vanish while
    walking are skipped.
    """
    if os.path.isfile(path):
        found = os.stat(path)
        return found.st_size, 1, found.st_mtime
    total_bytes = 0
    files = 0
    newest = None
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                found = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if not stat.S_ISREG(found.st_mode):
                continue
            total_bytes += found.st_size
            files += 1
            newest = found.st_mtime if newest is None else max(newest, found.st_mtime)
    return total_bytes, files, newest


def watch_download(
    path: str,
    interval_s: float,
    emit: Callable[[dict], None],
    cancelled: threading.Event,
) -> dict:
    """Emit `{"bytes", "files", "exists", "last_moved_at"}` every `interval_s` until cancelled.

    `last_moved_at` (epoch seconds) starts as the newest file's modification
    time, and becomes "now" whenever the byte count changes between samples.

    Returns:
        The last sample, with `"cancelled": true`.
    """
    last_bytes = None
    last_moved_at = None
    sample: dict = {}
    while True:
        exists = os.path.exists(path)
        total_bytes, files, newest = tree_size(path) if exists else (0, 0, None)
        if last_bytes is None:
            last_moved_at = newest
        elif total_bytes != last_bytes:
            last_moved_at = time.time()
        if newest is not None and (last_moved_at is None or newest > last_moved_at):
            last_moved_at = newest
        last_bytes = total_bytes
        sample = {
            "bytes": total_bytes,
            "files": files,
            "exists": exists,
            "last_moved_at": last_moved_at,
        }
        emit(sample)
        if cancelled.wait(interval_s):
            return dict(sample, cancelled=True)


@operation(
    Op.DOWNLOAD_WATCH,
    args={"path": Arg((str,)), "interval_s": Arg((int, float), 2.0, 0.05, 3600)},
)
def download_watch(given: dict, call: Any) -> dict:
    """`download.watch` `{path, interval_s?=2}` → events `{bytes, files, exists,
    last_moved_at}` until cancelled, then the last one with `cancelled`.

    Only a path inside the agent's own folders or the model directories is
    watched (`allowed_paths.py`); any other is `refused`.
    """
    refusal = allowed_paths.refusal(given["path"])
    if refusal:
        raise OpError("refused", "path {}".format(refusal))
    return watch_download(given["path"], given["interval_s"], call.emit, call.cancelled)
