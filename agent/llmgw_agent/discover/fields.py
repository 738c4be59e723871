"""Reading the values nvidia-smi and sysfs print: placeholders, units, booleans.

One place for what counts as "no value" (`N/A`, `[N/A]`, `Not Supported`,
`Insufficient Permissions` ...) and for splitting a number from its unit, so the
XML, text, CSV and NVML paths agree on what a missing value is.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Optional

_PLACEHOLDERS = {
    "",
    "n/a",
    "none",
    "not supported",
    "not available",
    "unknown error",
    "insufficient permissions",
    "requested functionality has been deprecated",
}

_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)", re.ASCII)
"""A number as the tools print one, in ASCII digits (`\\d` alone takes `٣`)."""


def clean(text: Optional[str]) -> Optional[str]:
    """The value as printed, or None when it is a placeholder.

    Brackets are dropped first: the CSV form prints `[N/A]` where XML prints
    `N/A`, and both mean the same thing.
    """
    if text is None:
        return None
    value = text.strip()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1].strip()
    if value.lower() in _PLACEHOLDERS:
        return None
    return value


def number(text: Optional[str]) -> Optional[float]:
    """The leading number of a value such as `19968 MiB`, `24 C`, `3.97 W`, else None."""
    value = clean(text)
    if value is None:
        return None
    match = _NUMBER.match(value)
    return float(match.group(1)) if match else None  # 400 digits: inf, never an exception


def whole(text: Optional[str]) -> Optional[int]:
    """Like `number`, rounded to an int (MiB, %, counts); no reading when it is not finite."""
    value = number(text)
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return None
    return round(value)


def flag(text: Optional[str]) -> Optional[bool]:
    """`True`/`Yes`/`Enabled` as True, `False`/`No`/`Disabled` as False, else None."""
    value = clean(text)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in ("true", "yes", "enabled", "1"):
        return True
    if lowered in ("false", "no", "disabled", "0"):
        return False
    return None


def is_zero_uuid(uuid: Optional[str]) -> bool:
    """True for a missing or all-zero UUID: a single machine's NVSwitch, not a domain."""
    if not uuid:
        return True
    return not any(ch not in "0-" for ch in uuid.strip())
