"""The sim engine's stdout: each line it prints written and flushed at once, as an engine's are.

The supervisor reads these lines into the shard's `engine.log`, so a line
held in a buffer would be a line the operator does not see.
"""

from __future__ import annotations

import os
import sys


def say(text: str, end: str = "\n") -> None:
    """Print one engine line (or a `\r` progress redraw) at once.

    A log reader that went away (its supervisor killed) costs the lines, not
    the engine: output goes to /dev/null from then on.
    """
    try:
        sys.stdout.write(text + end)
        sys.stdout.flush()
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 lives as long as the process
