"""Shard logs: captured in lines, capped on disk, read back as a tail and a follow.

Engines draw progress bars with carriage returns (tqdm redraws a line with
`\r`), so a "line" ends at `\n` or `\r`. Each shard keeps `engine.log` and
one older `engine.log.1`, each at most half the cap: the newest lines always
survive, and the total stays within `log_max_bytes`.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from pathlib import Path
from typing import Callable, List, Optional

LOG_NAME = "engine.log"
DEFAULT_LOG_MAX_BYTES = 16 * 1024 * 1024
_LONGEST_LINE_BYTES = 64 * 1024
"""A run of bytes with no line end is cut into lines of at most this size."""

_LINE_END = re.compile(rb"[\r\n]")


class CappedLog:
    """Appends whole lines to `engine.log`, rotating to `engine.log.1` at half the cap."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.path = directory / LOG_NAME
        self.older_path = directory / (LOG_NAME + ".1")
        self.file_max_bytes = max(4096, max_bytes // 2)
        self._lock = threading.Lock()
        # Unbuffered: a write the disk refuses fails now, and leaves nothing to flush later.
        self._handle = open(self.path, "ab", buffering=0)  # noqa: SIM115 closed in close()
        self._size = self._handle.tell()
        self.dropped_lines = 0

    def write_line(self, line: bytes) -> None:
        """Append one line (its end added here), rotating first when it would not fit.

        A line the disk has no room for is dropped, never waited on: the
        engine must not block on a full pipe. How many were dropped is the
        first line written once there is room again.
        """
        line = line[: self.file_max_bytes - 1] + b"\n"
        with self._lock:
            if self.dropped_lines:
                note = "[llmgw] {} lines dropped: no room to write the log\n".format(
                    self.dropped_lines
                ).encode()
                if self._append(note):
                    self.dropped_lines = 0
            if self.dropped_lines or not self._append(line):
                self.dropped_lines += 1

    def _append(self, line: bytes) -> bool:
        """Write one line; False when the disk refused it."""
        try:
            if self._size + len(line) > self.file_max_bytes:
                self._handle.close()
                os.replace(str(self.path), str(self.older_path))
                self._handle = open(self.path, "ab", buffering=0)  # noqa: SIM115
                self._size = 0
            written = self._handle.write(line) or 0
        except (OSError, ValueError):  # ValueError: the rotation could not reopen the file
            return False
        self._size += written
        return written == len(line)

    def close(self) -> None:
        """Close the current file."""
        with self._lock:
            self._handle.close()


class LineSplitter:
    """Cuts a byte stream into lines at `\n` or `\r`, dropping empty ones."""

    def __init__(self, write_line: Callable[[bytes], None], prefix: bytes = b"") -> None:
        self._write_line = write_line
        self._prefix = prefix
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream; complete lines are written now."""
        parts = _LINE_END.split(self._pending + chunk)
        self._pending = parts.pop()
        while len(self._pending) > _LONGEST_LINE_BYTES:
            parts.append(self._pending[:_LONGEST_LINE_BYTES])
            self._pending = self._pending[_LONGEST_LINE_BYTES:]
        for part in parts:
            if part:
                self._write_line(self._prefix + part)

    def close(self) -> None:
        """The stream ended: write what is left as the last line."""
        if self._pending:
            self._write_line(self._prefix + self._pending)
        self._pending = b""


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def tail_lines(directory: Path, count: int, current_bytes: Optional[int] = None) -> List[str]:
    """The last `count` lines of a shard's log (across the rotation).

    Args:
        current_bytes: read `engine.log` only this far (where a follow starts).
    """
    if count <= 0:
        return []
    lines: List[bytes] = []
    for path in (directory / LOG_NAME, directory / (LOG_NAME + ".1")):
        try:
            with open(path, "rb") as handle:
                limit = current_bytes if path.name == LOG_NAME else None
                raw = handle.read(-1 if limit is None else limit)
        except FileNotFoundError:
            continue
        lines = raw.splitlines()[-(count - len(lines)) :] + lines
        if len(lines) >= count:
            break
    return [_decode(line) for line in lines[-count:]]


class LogFollower:
    """Reads what is appended to `engine.log`, across rotations, in whole lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle = None
        self._inode: Optional[int] = None
        self._pending = b""
        self.start_offset: Optional[int] = None
        with contextlib.suppress(FileNotFoundError):
            self._open(seek_end=True)

    def _open(self, seek_end: bool) -> None:
        handle = open(self.path, "rb")  # noqa: SIM115 kept open across polls, closed in close()
        if seek_end:
            handle.seek(0, os.SEEK_END)
        self._handle = handle
        self._inode = os.fstat(handle.fileno()).st_ino
        self.start_offset = handle.tell()

    def read_new(self) -> List[str]:
        """Complete lines written since the last call."""
        chunks = []
        if self._handle is not None:
            chunks.append(self._handle.read())
        try:
            current_inode = os.stat(str(self.path)).st_ino
        except FileNotFoundError:
            current_inode = None
        if current_inode is not None and current_inode != self._inode:
            if self._handle is not None:
                chunks.append(self._handle.read())
                self._handle.close()
            self._open(seek_end=False)
            chunks.append(self._handle.read())
        unread = self._pending + b"".join(chunks)
        complete, _, self._pending = unread.rpartition(b"\n")
        return [_decode(line) for line in complete.split(b"\n")] if complete else []

    def close(self) -> None:
        """Let go of the log file."""
        if self._handle is not None:
            self._handle.close()
