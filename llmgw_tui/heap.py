"""Keeping Python's garbage collector from pausing the console while keys are handled.

At 2,048 nodes the console holds a few hundred thousand objects (modules,
widgets, the fleet's rows and Textual's caches of rendered lines), and each
poll and each frame allocates more. With Python's default thresholds a full
collection walked all of them a dozen times a minute while keys were pressed:
pauses of 0.1 to 0.9 s, 3.6 s (quiet machine) to 7 s (busy) in all over the
benchmark's keys (tests/benchmarks/bench_scale_console.py prints them).

So, once the fleet is first drawn: one collection, then `gc.freeze` (what is
alive then is never walked again, though still freed when unreferenced), and
thresholds that make full collections rare. Only objects caught in reference
cycles wait longer to be freed (the benchmark's RSS with every screen drawn
stayed at 94 MiB).

The young threshold is a trade: each young collection walks what is young,
each middle one what the last ten young ones left. At 10,000 a middle
collection walked up to ~100,000 objects, 220-230 ms on the benchmark's
machine, landing on whatever key was pressed; at 2,000 the longest was
41-48 ms, and the collector's CPU over the benchmark's keys went down
(680-690 ms in all, against 820 ms).
"""

from __future__ import annotations

import gc

GC_THRESHOLDS = (2_000, 10, 100)
"""Allocations before a young collection (Python: 700); young collections per middle one (10);
middle ones per full collection (Python: 10)."""

_frozen = False


def freeze_long_lived() -> bool:
    """Collect once, freeze what is alive, set `GC_THRESHOLDS` (the first call only); whether it did."""
    global _frozen
    if _frozen:
        return False
    _frozen = True
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    return True
