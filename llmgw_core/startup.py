"""Loading modules without paying Python's garbage collector for them.

Importing a path of this program (pydantic's models, asyncssh, the steps)
allocates a few hundred thousand objects, all of which live as long as the
process: modules, classes, functions, schemas. With the collector on, a
headless run that discovered 8 nodes spent 100-150 ms of its 2 s in 117
collections that freed nothing worth having, one of them a full walk of
every object (40-70 ms). So the heavy imports run with the collector
paused, and what they loaded is then frozen (never walked again, still
freed if it stops being referenced). The collector is on for everything
else a script does, which may run for hours.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def loading_modules() -> Iterator[None]:
    """Pause the collector for the block (imports, first schemas), then freeze what it left alive."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
