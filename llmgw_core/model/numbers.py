"""Whole numbers as a model's files give them (pure): the one test every reader shares."""

from __future__ import annotations

import math
from typing import Any


def whole_number(value: Any) -> int | None:
    """`value` as an int when it is a whole number, else None.

    An int (never a boolean: JSON `true` is not 1), or a float that is finite
    and integral (`4096.0`). A 400-digit integer is taken as the int it is —
    compared with a bound, never turned into a float, so it cannot overflow.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    return None
