"""Keeping Python's garbage collector from pausing the console while keys are handled.

A big fleet's console holds a few hundred thousand long-lived objects
(modules, widgets, the fleet's rows, Textual's caches of rendered lines), and
each poll and frame allocates more. With Python's default thresholds a full
collection walks all of them often, and each walk lands on whatever key was
pressed.

So, once the fleet is first drawn: one collection, then `gc.freeze` (what is
alive then is never walked again, though still freed when unreferenced), and
thresholds that make full collections rare. Only objects caught in reference
cycles wait longer to be freed.

The young threshold is a trade: each young collection walks what is young,
each middle one what the last ten young ones left; too high a threshold makes
each middle collection a pause a key can feel, too low makes many more of them.
The figures behind the chosen values are in docs/scale.md
(tests/benchmarks/bench_scale_console.py prints them).
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
