"""Each client key's limits at the gateway's front, and the tokens it used (standard library).

A key of the gateway's `keys_file` may carry limits (`LLMGW_FRONT_CONFIG`'s
`keys[].limits`):

* `requests_per_s`: a bucket of `max(1, requests_per_s)` requests, refilled
  at that rate; a request finding it empty is refused until it holds one;
* `concurrent`: requests of the key in flight at once;
* `tokens_per_min`: prompt and completion tokens, as the engines' own `usage`
  says, over the last 60 s; a key at or over it is refused until enough of
  the window has passed;
* `budget_tokens` per `budget_per` (`day` or `month`, UTC): tokens used in the
  period; at or over it the key is refused until the next period begins.

A refusal is OpenAI's: status 429, its error body, and `Retry-After` in whole
seconds. Tokens are known when an answer ends, so a key's requests already in
flight may take it past a token limit; the next one is refused.

The budgets' counts outlive the front: they are written, the user's alone,
into the agent's state folder under the gateway's name
(`gateways/NAME/budgets.json`), at most every `SAVE_EVERY_S` while they
change and when the front ends, and read back when a front of that name
starts there again.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import deque

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Deque, Dict, List, Optional, Tuple

LIMITS = ("requests_per_s", "concurrent", "tokens_per_min", "budget")
"""The limit names the metrics and refusals use."""
WINDOW_S = 60.0
SAVE_EVERY_S = 1.0
PERIODS = ("day", "month")


class Refused:
    """A request a key's limit refuses: which limit, when to try again, what to say."""

    def __init__(self, limit: str, retry_after_s: float, message: str) -> None:
        self.limit = limit
        self.retry_after_s = max(1, math.ceil(retry_after_s))
        self.message = message

    @property
    def kind(self) -> str:
        """OpenAI's error type: a rate limit, or a quota used up."""
        return "insufficient_quota" if self.limit == "budget" else "rate_limit_exceeded"


def period_of(per: str, wall: float) -> str:
    """The UTC day (`2026-12-06`) or month (`2026-12`) `wall` falls in."""
    moment = time.gmtime(wall)
    return time.strftime("%Y-%m-%d" if per == "day" else "%Y-%m", moment)


def next_period_s(per: str, wall: float) -> float:
    """Seconds from `wall` until the next UTC day or month begins."""
    moment = time.gmtime(wall)
    if per == "day":
        start = (moment.tm_year, moment.tm_mon, moment.tm_mday + 1, 0, 0, 0, 0, 0, 0)
    else:
        year, month = (
            (moment.tm_year + 1, 1) if moment.tm_mon == 12 else (moment.tm_year, moment.tm_mon + 1)
        )
        start = (year, month, 1, 0, 0, 0, 0, 0, 0)
    import calendar

    return calendar.timegm(start) - wall  # timegm normalises day 32 to the next month


def _number(spec: dict, name: str, whole: bool) -> Optional[float]:
    """A positive finite number of `spec`, or None when absent."""
    value = spec.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("{} is not a number".format(name))
    if not math.isfinite(value) or value <= 0 or (whole and value != int(value)):
        raise ValueError(
            "{} must be a positive {}".format(name, "whole number" if whole else "number")
        )
    return value


class KeyQuota:
    """One key's limits and what it has used of them."""

    def __init__(self, spec: dict) -> None:
        if not isinstance(spec, dict):
            raise ValueError("limits is not an object")
        self.requests_per_s = _number(spec, "requests_per_s", False)
        concurrent = _number(spec, "concurrent", True)
        self.concurrent = int(concurrent) if concurrent is not None else None
        tokens = _number(spec, "tokens_per_min", True)
        self.tokens_per_min = int(tokens) if tokens is not None else None
        budget = _number(spec, "budget_tokens", True)
        self.budget_tokens = int(budget) if budget is not None else None
        self.budget_per = str(spec.get("budget_per") or "day")
        if self.budget_per not in PERIODS:
            raise ValueError("budget_per is day or month")
        self.burst = max(1.0, self.requests_per_s or 0.0)
        self.bucket = self.burst
        self.filled_at: Optional[float] = None
        self.in_flight = 0
        self.window: Deque[Tuple[float, int]] = deque()
        self.period = ""
        self.used = 0

    @property
    def counts_tokens(self) -> bool:
        """Whether this key's limits need each answer's tokens."""
        return self.tokens_per_min is not None or self.budget_tokens is not None

    def _in_window(self, now: float) -> int:
        while self.window and self.window[0][0] <= now - WINDOW_S:
            self.window.popleft()
        return sum(tokens for _, tokens in self.window)

    def _used_now(self, wall: float) -> int:
        period = period_of(self.budget_per, wall)
        if period != self.period:
            self.period, self.used = period, 0
        return self.used

    def admit(self, now: float, wall: float) -> Optional[Refused]:
        """Take one request (None) or say which limit refuses it; nothing is taken then."""
        if self.budget_tokens is not None and self._used_now(wall) >= self.budget_tokens:
            return Refused(
                "budget",
                next_period_s(self.budget_per, wall),
                "This key has used its budget of {} tokens for the {} ({} used); it renews "
                "at the start of the next {} (UTC).".format(
                    self.budget_tokens, self.budget_per, self.used, self.budget_per
                ),
            )
        if self.tokens_per_min is not None:
            in_window = self._in_window(now)
            if in_window >= self.tokens_per_min:
                return Refused(
                    "tokens_per_min",
                    self.window[0][0] + WINDOW_S - now,
                    "Rate limit reached for tokens per minute: limit {}, used {}.".format(
                        self.tokens_per_min, in_window
                    ),
                )
        if self.concurrent is not None and self.in_flight >= self.concurrent:
            return Refused(
                "concurrent",
                1.0,
                "Too many requests at once for this key: limit {}.".format(self.concurrent),
            )
        if self.requests_per_s is not None:
            if self.filled_at is not None:
                gained = (now - self.filled_at) * self.requests_per_s
                self.bucket = min(self.burst, self.bucket + gained)
            self.filled_at = now
            if self.bucket < 1.0:
                return Refused(
                    "requests_per_s",
                    (1.0 - self.bucket) / self.requests_per_s,
                    "Rate limit reached for requests per second: limit {:g}.".format(
                        self.requests_per_s
                    ),
                )
            self.bucket -= 1.0
        self.in_flight += 1
        return None

    def spent(self, tokens: int, now: float, wall: float) -> None:
        """An answer of this key used `tokens` (prompt and completion)."""
        if tokens <= 0:
            return
        if self.tokens_per_min is not None:
            self.window.append((now, tokens))
        if self.budget_tokens is not None:
            self._used_now(wall)
            self.used += tokens


class Quotas:
    """Every limited key's quota, and the store their budgets outlive the front in."""

    def __init__(self, limits: Dict[str, dict], store: Optional[Path] = None) -> None:
        self.keys: Dict[str, KeyQuota] = {}
        for key_id, spec in limits.items():
            try:
                self.keys[key_id] = KeyQuota(spec)
            except ValueError as exc:
                raise ValueError("the limits of key {}: {}".format(key_id, exc)) from None
        self.store = store
        self.dirty = False
        self.saved_at = 0.0
        self._load()

    def counts_tokens(self, key_id: str) -> bool:
        quota = self.keys.get(key_id)
        return quota is not None and quota.counts_tokens

    def admit(self, key_id: str) -> Optional[Refused]:
        """Take a request of `key_id` (None: go on, and call `finished` when it ends)."""
        quota = self.keys.get(key_id)
        if quota is None:
            return None
        return quota.admit(time.monotonic(), time.time())

    def finished(self, key_id: str, tokens: int) -> None:
        """A request `admit` took has ended, having used `tokens`."""
        quota = self.keys.get(key_id)
        if quota is None:
            return
        quota.in_flight = max(0, quota.in_flight - 1)
        if tokens > 0 and quota.counts_tokens:
            quota.spent(tokens, time.monotonic(), time.time())
            if quota.budget_tokens is not None:
                self.dirty = True
                if time.monotonic() - self.saved_at >= SAVE_EVERY_S:
                    self.save()

    def budgets(self) -> List[Tuple[str, str, int, int]]:
        """(key id, period, used, budget) of every key with a budget."""
        found = []
        wall = time.time()
        for key_id, quota in sorted(self.keys.items()):
            if quota.budget_tokens is not None:
                used = quota._used_now(wall)
                found.append((key_id, quota.period, used, quota.budget_tokens))
        return found

    def _load(self) -> None:
        if self.store is None:
            return
        try:
            kept = json.loads(self.store.read_text())
        except (OSError, ValueError):
            return  # none yet, or damaged: the budgets start from nothing
        if not isinstance(kept, dict):
            return
        for key_id, quota in self.keys.items():
            entry = kept.get(key_id)
            if quota.budget_tokens is None or not isinstance(entry, dict):
                continue
            period, used = entry.get("period"), entry.get("used")
            if not isinstance(used, int) or isinstance(used, bool) or used < 0:
                continue
            if period == period_of(quota.budget_per, time.time()):
                quota.period, quota.used = str(period), used

    def save(self) -> None:
        """Write the budgets' counts (atomically, 0600), if they changed."""
        self.saved_at = time.monotonic()
        if self.store is None or not self.dirty:
            return
        kept = {
            key_id: {"period": period, "used": used, "budget": budget}
            for key_id, period, used, budget in self.budgets()
        }
        partial = self.store.with_name(self.store.name + ".partial")
        try:
            fd = os.open(str(partial), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump(kept, out)
            os.replace(str(partial), str(self.store))
            self.dirty = False
        except OSError:
            pass  # kept dirty: the next save tries again
