"""The front's access log: a JSON line per request a client key made, and its request id.

Each request that showed a key of the gateway gets a line when it ends:

    {"at": 1796000000.1, "id": "…", "key": "team-a", "model": "sql", "worker": "https://…",
     "status": 200, "prompt_tokens": 9, "completion_tokens": 2, "ttft_s": 0.041,
     "duration_s": 0.310, "queued_s": null}

`at` is when it came (seconds since the epoch), `worker` the engine it went
to (null when the front answered itself: a limit, a model the key may not
use), the tokens the engine's `usage` said (null where it said none),
`ttft_s` the time to the answer's first byte of body, and `queued_s` the
time it waited at the front for its turn (`fair.py`; null without fair
shares). Never a prompt, an answer or a key. Requests without a key of the gateway are counted in the
metrics, not logged: a flood of them must not push the keyed lines out.

The log is `access.log` in the folder kept under the gateway's name in the
agent's state folder (`gateways/NAME/`, 0700, so a gateway started again
under its name goes on with it), the lines the operator's alone (0600),
rotated at `ROTATE_BYTES` into `access.log.1` … `.KEPT`. `usage` gives the
sums per UTC day, key and model for the `usage` step: kept as lines are
written, from the kept files read once when the front starts (`load`), so
asking never stalls the front, and a line rotated out while it runs still
counts.

The request id is the client's `X-Request-Id` when it is a plain token
(`REQUEST_ID`), else one the front makes; the engine gets it and the client
gets it back.
"""

from __future__ import annotations

import json
import os
import re
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

ROTATE_BYTES = 32 * 1024 * 1024
KEPT = 3
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")
LOG_NAME = "access.log"


def request_id(given: str) -> str:
    """The client's `X-Request-Id` when it is a plain token, else a new one (32 hex digits)."""
    if REQUEST_ID.match(given):
        return given
    return os.urandom(16).hex()


class Exchange:
    """One request as the access log will say it."""

    def __init__(self, rid: str, key_id: str) -> None:
        self.at = time.time()
        self.started = time.monotonic()
        self.id = rid
        self.key = key_id
        self.model: Optional[str] = None
        self.worker: Optional[str] = None
        self.status = 0
        self.tokens: Optional[Tuple[int, int]] = None
        self.first_at: Optional[float] = None
        self.queued_s: Optional[float] = None

    def line(self) -> Dict[str, Any]:
        now = time.monotonic()
        return {
            "at": round(self.at, 3),
            "id": self.id,
            "key": self.key,
            "model": self.model,
            "worker": self.worker,
            "status": self.status,
            "prompt_tokens": self.tokens[0] if self.tokens else None,
            "completion_tokens": self.tokens[1] if self.tokens else None,
            "ttft_s": round(self.first_at - self.started, 4) if self.first_at else None,
            "duration_s": round(now - self.started, 4),
            "queued_s": round(self.queued_s, 4) if self.queued_s is not None else None,
        }


class AccessLog:
    """The JSON lines, appended and rotated; None as a folder logs nothing (a front in a test)."""

    def __init__(self, folder: Optional[str]) -> None:
        self.path = os.path.join(folder, LOG_NAME) if folder else None
        self._fd: Optional[int] = None
        self._size = 0
        self.sums: Dict[Tuple[str, str, str], List[int]] = {}
        """(UTC day, key id, model) → requests, answered, prompt and completion tokens."""

    def load(self) -> None:
        """Sum the kept files (once, before the front serves)."""
        for name in self.files():
            try:
                with open(name, "rb") as lines:
                    for raw in lines:
                        _add(self.sums, raw)
            except OSError:
                continue

    def write(self, exchange: Exchange) -> None:
        """Append the exchange's line; a log that cannot be written loses it, never the answer."""
        if self.path is None:
            return
        line = exchange.line()
        _count(self.sums, line)
        text = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        try:
            if self._fd is None or self._size + len(text) > ROTATE_BYTES:
                self._rotate()
            assert self._fd is not None
            os.write(self._fd, text)
            self._size += len(text)
        except OSError:
            self.close()

    def _rotate(self) -> None:
        assert self.path is not None
        if self._fd is not None:
            self.close()
            for number in range(KEPT - 1, 0, -1):
                older = "{}.{}".format(self.path, number)
                if os.path.exists(older):
                    os.replace(older, "{}.{}".format(self.path, number + 1))
            os.replace(self.path, self.path + ".1")
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
        self._fd = os.open(self.path, flags, 0o600)
        self._size = os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def files(self) -> List[str]:
        """The kept files, oldest first."""
        if self.path is None:
            return []
        named = ["{}.{}".format(self.path, n) for n in range(KEPT, 0, -1)] + [self.path]
        return [name for name in named if os.path.exists(name)]

    def usage(self) -> List[Dict[str, Any]]:
        """Requests and tokens per UTC day, key and model: the kept files as loaded, and every
        line written since."""
        return [
            {
                "day": day,
                "key": key,
                "model": model,
                "requests": counts[0],
                "answered": counts[1],
                "prompt_tokens": counts[2],
                "completion_tokens": counts[3],
            }
            for (day, key, model), counts in sorted(self.sums.items())
        ]


def _add(sums: Dict[Tuple[str, str, str], List[int]], raw: bytes) -> None:
    try:
        line = json.loads(raw.decode())
    except (ValueError, UnicodeDecodeError):
        return  # a line cut short by a full disk, say: the others still count
    if isinstance(line, dict):
        _count(sums, line)


def _count(sums: Dict[Tuple[str, str, str], List[int]], line: Dict[str, Any]) -> None:
    try:
        day = time.strftime("%Y-%m-%d", time.gmtime(float(line["at"])))
        found = (day, str(line["key"]), str(line.get("model") or ""))
        status = int(line.get("status") or 0)
        prompt = int(line.get("prompt_tokens") or 0)
        completion = int(line.get("completion_tokens") or 0)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, OSError):
        return  # a field that is not what the front writes: the line is passed over
    counts = sums.setdefault(found, [0, 0, 0, 0])
    counts[0] += 1
    counts[1] += 1 if 200 <= status < 300 else 0
    counts[2] += prompt
    counts[3] += completion
