"""Fair shares between a gateway's keys while its engines are saturated (standard library).

With `fair` in the front's configuration, the front decides who goes first
once the engines behind it cannot take everything at once; until then it
lets every request through as it comes, and this costs nothing.

* **Saturated is the engines' own word.** Every `LOAD_INTERVAL_S` the front
  reads each worker's `/metrics`: the requests its engine runs and the ones it
  queues (`RUNNING`, `WAITING`: vLLM's, SGLang's and llama-server's names). An
  engine that queued `waiting` or more on two reads in a row is full, and what
  it ran then is its capacity. A worker whose engine never said so has no
  capacity known, and a model with such a worker is never held back.
* **Held at the front, not in the engine.** Once every worker of a model has
  a capacity, the front keeps its own requests in flight to them within the
  sum; the rest wait here, where their order can still be chosen. `reserve`
  sequences per worker are kept for the lighter keys: a key with requests in
  flight is held at the capacity less the reserve while a key that came for
  the same model in the last `RECENT_S` was served fewer virtual tokens than
  it in that time,
  so a light key's request finds a free sequence at once instead of waiting
  for one to end (alone, a key has the whole capacity).
* **Order.** Priority class first (`high`, `normal`, `low`, strictly), then the
  key whose virtual token counter is least (VTC: Sheng et al., "Fairness in
  Serving Large Language Models", OSDI 2024). A key's counter grows by the
  tokens its requests used — prompt tokens once, completion tokens twice, the
  paper's weights — divided by the key's `weight`: when it is let through, by
  its body's bytes over `BYTES_PER_TOKEN`, and when it ends, by what its
  engine's `usage` said instead. A key that becomes active again is lifted to
  the least counter of the active keys, so time spent idle banks no credit;
  between equal counters, the key with fewer requests pending goes first.
* **Bounded.** At most `queue` requests wait. When full, a newcomer that
  ranks above the worst waiting request takes its place and the worst is
  refused; otherwise the newcomer is. A request that waited `queue_timeout_s`
  is refused too. Refusals are 503 with `Retry-After`, as OpenAI answers an
  overloaded engine.
* **Capacity is learnt again.** An engine may batch more than it did when it
  first filled (shorter prompts leave more of its KV cache free): while
  requests wait here and an engine runs its whole capacity with nothing
  queued, the capacity grows every `PROBE_EVERY_S`, by a 64th, then by
  twice as much each time the engine took the last probe without queueing
  (up to an eighth). A read on which the engine queues while running what a
  probe gave it sets the capacity back at once; any other change takes two
  reads in a row (one may catch a burst between two steps of the engine's
  scheduler, or long prompts over one step's token budget).

The queue's length per model is published in the front's metrics, where
`keep` adds it to the engines' waiting requests: what waits here is load the
engines would otherwise be queueing.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque

from llmgw_agent.front.quota import Refused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Deque, Dict, List, Optional, Tuple

PRIORITIES = ("high", "normal", "low")
PROMPT_WEIGHT = 1.0
COMPLETION_WEIGHT = 2.0
BYTES_PER_TOKEN = 4
LOAD_INTERVAL_S = 1.0
PROBE_EVERY_S = 10.0
PROBE_SHARE = 64
"""A first probe adds this share of the capacity (one at least): what overshoots it waits
in the engine's queue, and every request waits here until that queue has drained."""
PROBE_SHARE_LARGEST = 8
"""The largest share a probe adds, after the engine took the ones before it."""
RECENT_S = 10.0
"""How long after another key's last request a busier key is still kept off the reserve."""
SEEN_LIMIT = 256
"""Keys seen that may pile up before those not seen for `RECENT_S` are forgotten."""
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred")
"""The engines' own gauges of requests running and queued (the sim publishes the same)."""
DEFAULTS = {"waiting": 1, "queue": 256, "queue_timeout_s": 30.0, "reserve": 1}


class Waiter:
    """One request waiting for its turn."""

    __slots__ = ("base", "estimate", "key", "seq", "since", "turn")

    def __init__(self, key: str, base: str, estimate: int, seq: int, turn: asyncio.Future) -> None:
        self.key, self.base, self.estimate, self.seq = key, base, estimate, seq
        self.since = time.monotonic()
        self.turn = turn  # its result: None (go) or a Refused (refused)


def _spec_number(spec: dict, name: str, whole: bool, least: float, most: float) -> float:
    value = spec.get(name, DEFAULTS[name])
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("fair.{} is not a number".format(name))
    if not math.isfinite(value) or not least <= value <= most or (whole and value != int(value)):
        raise ValueError(
            "fair.{} is a {} from {:g} to {:g}".format(
                name, "whole number" if whole else "number", least, most
            )
        )
    return value


class Shares:
    """The keys' counters, the requests waiting, and what each model's workers may take."""

    def __init__(self, spec: dict, keys: Dict[str, Tuple[float, str]], pool=None) -> None:
        if not isinstance(spec, dict):
            raise ValueError("fair is not an object")
        unknown = sorted(set(spec) - set(DEFAULTS))
        if unknown:
            raise ValueError("fair has no field {}".format(unknown[0]))
        self.waiting_at = int(_spec_number(spec, "waiting", True, 1, 100000))
        self.queue_max = int(_spec_number(spec, "queue", True, 1, 100000))
        self.timeout_s = float(_spec_number(spec, "queue_timeout_s", False, 0.001, 3600))
        self.reserve = int(_spec_number(spec, "reserve", True, 0, 100000))
        self.weight: Dict[str, float] = {}
        self.rank: Dict[str, int] = {}
        for key_id, (weight, priority) in keys.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)):
                raise ValueError("the weight of key {} is not a number".format(key_id))
            if not math.isfinite(weight) or not 0 < weight <= 1000:
                raise ValueError("the weight of key {} is above 0, at most 1000".format(key_id))
            if priority not in PRIORITIES:
                raise ValueError(
                    "the priority of key {} is one of {}".format(key_id, ", ".join(PRIORITIES))
                )
            self.weight[key_id], self.rank[key_id] = float(weight), PRIORITIES.index(priority)
        self.pool = pool
        """The front's workers (`routing.Pool`), given once the front has made it."""
        self.counters: Dict[str, float] = {}
        """Each key's virtual tokens: what it was served, weighted."""
        self.active: Dict[str, int] = {}
        """Each key's requests waiting or in flight."""
        self.running: Dict[str, int] = {}
        """Each key's requests let through and not yet ended."""
        self.in_reserve: Dict[str, int] = {}
        self.reserved_of: Dict[Tuple[str, str], int] = {}
        """Per model, and per key and model: requests in flight on a reserved sequence."""
        self.seen: Dict[Tuple[str, str], float] = {}
        """When each key's last request for each model came."""
        self._seen_limit = SEEN_LIMIT
        self.charges: Dict[str, Deque[Tuple[float, float]]] = {}
        self.recent_sum: Dict[str, float] = {}
        """Each key's charges of the last `RECENT_S` (when, virtual tokens), and their sum."""
        self.in_flight: Dict[str, int] = {}
        """Each model's requests let through and not yet ended."""
        self.queue: List[Waiter] = []
        self._seq = 0
        self.held_total: Dict[str, int] = {}
        """Per key: requests that waited here, and (below) the seconds they waited."""
        self.held_s_total: Dict[str, float] = {}
        self.full_reads: Dict[str, int] = {}
        """Per worker URL: reads in a row on which its engine queued `waiting` or more."""

    # --- order ---------------------------------------------------------------

    def _order(self, key: str) -> Tuple[int, float, int]:
        """Priority class, then virtual tokens, then (a tie, as after a lift) the key with
        fewer requests waiting or in flight."""
        return self.rank.get(key, 1), self.counters.get(key, 0.0), self.active.get(key, 0)

    def _recent(self, key: str, now: float) -> float:
        """The virtual tokens `key` was charged in the last `RECENT_S`."""
        charges = self.charges.get(key)
        if not charges:
            return 0.0
        while charges and charges[0][0] <= now - RECENT_S:
            self.recent_sum[key] -= charges.popleft()[1]
        return self.recent_sum[key]

    def _kept_off_reserve(self, key: str, base: str) -> bool:
        """Whether `key` has requests in flight while a key that came lately for the same
        model was served less than it in the last `RECENT_S`: the reserve is that key's."""
        if not self.reserve or not self.running.get(key):
            return False
        now = time.monotonic()
        mine = self._recent(key, now)
        return any(
            self._recent(k, now) < mine
            for (k, model), at in self.seen.items()
            if k != key and model == base and at > now - RECENT_S
        )

    def _lift(self, key: str) -> None:
        """A key becoming active starts no lower than the least active counter."""
        if self.active.get(key):
            return
        others = [self.counters.get(k, 0.0) for k, n in self.active.items() if n > 0]
        mine = self.counters.get(key, 0.0)
        self.counters[key] = max(mine, min(others)) if others else mine

    def _charge(self, key: str, tokens: float) -> None:
        weighted = tokens / self.weight.get(key, 1.0)
        self.counters[key] = self.counters.get(key, 0.0) + weighted
        now = time.monotonic()
        self.charges.setdefault(key, deque()).append((now, weighted))
        self.recent_sum[key] = self.recent_sum.get(key, 0.0) + weighted
        self._recent(key, now)  # what left the window goes now: the deque stays bounded

    # --- room ----------------------------------------------------------------

    def _capacity(self, base: str) -> Optional[Tuple[int, int]]:
        """What the healthy workers of model `base` take at once, and how many they are;
        None while one has not said (or none is healthy: the router answers that)."""
        workers = [w for w in self.pool.workers.values() if w.healthy and w.model == base]
        if not workers or any(w.capacity is None for w in workers):
            return None
        return sum(w.capacity for w in workers), len(workers)

    def _room(self, base: str, key: str) -> Optional[bool]:
        """Whether a request of `key` for `base` may go now: None (no room), False (a
        sequence of the capacity's), True (a reserved one, kept for the keys served least
        lately)."""
        known = self._capacity(base)
        if known is None:
            return False
        total, workers = known
        reserve = min(self.reserve * workers, total - 1)
        ordinary = self.in_flight.get(base, 0) - self.in_reserve.get(base, 0)
        if self.in_flight.get(base, 0) >= total:
            return None
        if ordinary < total - reserve:
            return False
        return None if self._kept_off_reserve(key, base) else True

    def _ahead(self, base: str, key: str) -> bool:
        """Whether a request of the same model waiting here, with room to go, ranks before
        `key`'s (one kept off the reserve holds nobody up)."""
        mine = self._order(key)
        return any(
            w.base == base and self._order(w.key) < mine and self._room(base, w.key) is not None
            for w in self.queue
        )

    # --- a request's way through ---------------------------------------------

    async def take(self, key: str, base: str, estimate: int) -> Optional[Refused]:
        """Let a request of `key` for model `base` through, now or in its turn (None: go, and
        call `done` when it ends), or refuse it (a `Refused`; nothing to call then)."""
        self._lift(key)
        self.active[key] = self.active.get(key, 0) + 1
        now = time.monotonic()
        self.seen[(key, base)] = now
        if len(self.seen) > self._seen_limit:  # keys long gone leave (amortised: the limit
            # doubles with what stays), so judging the reserve never walks every key ever seen
            self.seen = {k: at for k, at in self.seen.items() if at > now - RECENT_S}
            self._seen_limit = max(SEEN_LIMIT, 2 * len(self.seen))
        room = self._room(base, key)
        if room is not None and not self._ahead(base, key):
            self._start(key, base, estimate, room)
            return None
        if len(self.queue) >= self.queue_max:
            worst = max(self.queue, key=lambda w: (self._order(w.key), w.seq))
            if self._order(worst.key) <= self._order(key):
                self._leave(key)
                return self._full()
            self.queue.remove(worst)
            worst.turn.set_result(self._full())
        self._seq += 1
        waiter = Waiter(key, base, estimate, self._seq, asyncio.get_running_loop().create_future())
        self.queue.append(waiter)
        try:
            outcome = await asyncio.wait_for(asyncio.shield(waiter.turn), self.timeout_s)
        except asyncio.TimeoutError:
            if waiter.turn.done():  # its turn came as the time ran out
                outcome = waiter.turn.result()
            else:
                self.queue.remove(waiter)
                waiter.turn.cancel()
                outcome = Refused(
                    "queue_timeout",
                    1.0,
                    "The engines are overloaded: this request waited {:g} s at the gateway "
                    "without its turn. Try again later.".format(self.timeout_s),
                )
        except asyncio.CancelledError:
            if waiter in self.queue:
                self.queue.remove(waiter)
                self._leave(key)
            elif waiter.turn.done() and waiter.turn.result() is None:
                self.done(key, base, estimate, None)  # let through, never sent
            else:
                self._leave(key)
            raise
        self.held_total[key] = self.held_total.get(key, 0) + 1
        self.held_s_total[key] = self.held_s_total.get(key, 0.0) + time.monotonic() - waiter.since
        if outcome is not None:
            self._leave(key)
        return outcome

    def _full(self) -> Refused:
        return Refused(
            "queue_full",
            1.0,
            "The engines are overloaded and the gateway's queue is full ({} requests). "
            "Try again later.".format(self.queue_max),
        )

    def _start(self, key: str, base: str, estimate: int, reserved: bool) -> None:
        self.in_flight[base] = self.in_flight.get(base, 0) + 1
        self.running[key] = self.running.get(key, 0) + 1
        if reserved:
            self.in_reserve[base] = self.in_reserve.get(base, 0) + 1
            self.reserved_of[(key, base)] = self.reserved_of.get((key, base), 0) + 1
        self._charge(key, estimate * PROMPT_WEIGHT)

    def _leave(self, key: str) -> None:
        left = self.active.get(key, 0) - 1
        if left > 0:
            self.active[key] = left
        else:
            self.active.pop(key, None)

    def done(self, key: str, base: str, estimate: int, tokens: Optional[Tuple[int, int]]) -> None:
        """A request `take` let through has ended, having used `tokens` (prompt, completion;
        None where the engine did not say: the estimate stands)."""
        self.in_flight[base] = max(0, self.in_flight.get(base, 0) - 1)
        self.running[key] = max(0, self.running.get(key, 0) - 1)
        if self.reserved_of.get((key, base)):  # one of its requests held a reserved sequence
            self.reserved_of[(key, base)] -= 1
            self.in_reserve[base] = max(0, self.in_reserve.get(base, 0) - 1)
        if tokens is not None:
            prompt, completion = tokens
            self._charge(key, (prompt - estimate) * PROMPT_WEIGHT + completion * COMPLETION_WEIGHT)
        self._leave(key)
        self.pump()

    def pump(self) -> None:
        """Let through every waiting request there is room for, the first in order first."""
        while self.queue:
            best = None  # type: Optional[Waiter]
            room = None  # type: Optional[bool]
            for waiter in self.queue:
                found = self._room(waiter.base, waiter.key)
                if found is None:
                    continue
                if best is None or (self._order(waiter.key), waiter.seq) < (
                    self._order(best.key),
                    best.seq,
                ):
                    best, room = waiter, found
            if best is None or room is None:
                return
            self.queue.remove(best)
            self._start(best.key, best.base, best.estimate, room)
            best.turn.set_result(None)

    # --- what the engines say --------------------------------------------------

    def engine_said(self, worker, running: float, waiting: float, now: float) -> None:
        """One read of `worker`'s engine's gauges: its capacity learnt or probed."""
        if waiting >= self.waiting_at:
            reads = self.full_reads.get(worker.url, 0) + 1
            self.full_reads[worker.url] = reads
            known = worker.capacity
            # Learnt, or lowered, on two reads in a row (one may catch a burst between two
            # scheduler steps, or long prompts over one step's token budget); a probe's own
            # overshoot, running at what the front gave it, is taken back on one.
            if reads >= 2 or (known is not None and running >= known - known // PROBE_SHARE - 1):
                worker.capacity = max(1, int(running))
                worker.probed_at = max(worker.probed_at, now)
                worker.probe_share = PROBE_SHARE
            return
        self.full_reads[worker.url] = 0
        if (
            worker.capacity is not None
            and running >= worker.capacity
            and any(w.base == worker.model for w in self.queue)
            and now - worker.probed_at >= PROBE_EVERY_S
        ):
            # Each probe the engine took without queueing doubles the next one (a capacity
            # learnt low comes back in minutes, not hours); one it queued starts again small.
            worker.capacity += max(1, worker.capacity // worker.probe_share)
            worker.probe_share = max(PROBE_SHARE_LARGEST, worker.probe_share // 2)
            worker.probed_at = now

    # --- what it counted -------------------------------------------------------

    def metrics_text(self) -> str:
        """The queue per model, each key's counter and waits, the gap between the keys served
        most and least, each worker's learnt capacity: Prometheus text."""
        queued: Dict[str, int] = {}
        for waiter in self.queue:
            queued[waiter.base] = queued.get(waiter.base, 0) + 1
        for base in self.in_flight:
            queued.setdefault(base, 0)
        active = [self.counters.get(k, 0.0) for k, n in self.active.items() if n > 0]
        lines = [
            "# HELP llmgw_gateway_queued Requests waiting at the front for their turn, by model.",
            "# TYPE llmgw_gateway_queued gauge",
        ]
        lines += [
            'llmgw_gateway_queued{{model="{}"}} {}'.format(_label(m), n)
            for m, n in sorted(queued.items())
        ]
        lines += [
            "# HELP llmgw_gateway_fair_tokens Each client key's virtual tokens: prompt tokens "
            "plus twice the completion tokens it was served, over its weight.",
            "# TYPE llmgw_gateway_fair_tokens gauge",
        ]
        lines += [
            'llmgw_gateway_fair_tokens{{key="{}"}} {}'.format(_label(k), round(v, 1))
            for k, v in sorted(self.counters.items())
        ]
        lines += [
            "# HELP llmgw_gateway_fairness_gap_tokens The virtual tokens between the active "
            "keys served most and least (0 with one active key or none).",
            "# TYPE llmgw_gateway_fairness_gap_tokens gauge",
            "llmgw_gateway_fairness_gap_tokens {}".format(
                round(max(active) - min(active), 1) if active else 0
            ),
            "# HELP llmgw_gateway_held_total Requests that waited at the front for their turn "
            "(those refused after waiting, timed out or given way, included).",
            "# TYPE llmgw_gateway_held_total counter",
        ]
        lines += [
            'llmgw_gateway_held_total{{key="{}"}} {}'.format(_label(k), n)
            for k, n in sorted(self.held_total.items())
        ]
        lines += [
            "# HELP llmgw_gateway_held_seconds_total Seconds requests waited at the front.",
            "# TYPE llmgw_gateway_held_seconds_total counter",
        ]
        lines += [
            'llmgw_gateway_held_seconds_total{{key="{}"}} {}'.format(_label(k), round(s, 4))
            for k, s in sorted(self.held_s_total.items())
        ]
        lines += [
            "# HELP llmgw_gateway_worker_capacity Requests each worker's engine runs at once, "
            "learnt from its own gauges when it queued (absent until it has).",
            "# TYPE llmgw_gateway_worker_capacity gauge",
        ]
        for w in sorted(self.pool.workers.values(), key=lambda w: w.url):
            if w.capacity is not None:
                lines.append(
                    'llmgw_gateway_worker_capacity{{worker="{}",model="{}"}} {}'.format(
                        _label(w.url), _label(w.model), w.capacity
                    )
                )
        return "\n".join(lines) + "\n"


def gauges(text: str) -> Tuple[Optional[float], Optional[float]]:
    """The requests running and waiting an engine's `/metrics` text says (summed over its
    label sets), None for a family it does not publish."""
    running = waiting = None  # type: Optional[float]
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in RUNNING and name not in WAITING:
            continue
        rest = line[line.rfind("}") + 1 :] if "{" in line else line[len(name) :]
        try:
            value = float(rest.split()[0])  # a timestamp may follow
        except (ValueError, IndexError):
            continue
        if not math.isfinite(value) or value < 0:
            continue
        if name in RUNNING:
            running = (running or 0.0) + value
        else:
            waiting = (waiting or 0.0) + value
    return running, waiting


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
