"""Reading the values nvidia-smi and sysfs print: placeholders, units, booleans.

One place for what counts as "no value" (`N/A`, `[N/A]`, `Not Supported`,
`Insufficient Permissions` ...) and for splitting a number from its unit, so the
XML, text, CSV and NVML paths agree on what a missing value is.

And one rule for every number read from text: an integer is ASCII digits
(`ascii_int`), a measurement is finite and within `MAX_READING` (`finite`).
`str.isdigit()` takes `²`, which `int()` refuses, and `\\d` takes `٣`, which
`int()` reads as 3 though no tool prints it: neither is used alone anywhere in
discovery.
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

_NUMBER = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)")
"""A number as the tools print one, in ASCII digits (`\\d` alone takes `٣`)."""

_DIGITS = re.compile(r"[0-9]{1,16}")

MAX_READING = 2**53
"""The largest figure discovery keeps (a float's exact integers, the console's own bound):
no count, index, size or rate of any machine comes near; a larger one is a damaged capture."""


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


def ascii_int(text: Optional[str]) -> Optional[int]:
    """An integer written in ASCII digits only (`"12"`), else None; the one way text becomes an int.

    Nothing around the digits is taken (no sign, no space). `str.isdigit()`
    accepts `²`, on which `int()` raises; `int()` reads `٣` and `１２`, which
    no tool or kernel file prints. More than 16 digits (beyond `MAX_READING`)
    is no index or count of a machine, and Python 3.11 refuses to convert
    4,300 of them: None, never an exception.
    """
    if text is None or not _DIGITS.fullmatch(text):
        return None
    value = int(text)
    return value if value <= MAX_READING else None


def finite(value: Optional[float]) -> Optional[float]:
    """`value` when it is a real reading: finite and within `MAX_READING`, else None.

    The one way a float enters the facts: 400 digits read as infinity, and
    NaN or infinity would reach the console as JSON no parser must accept.
    """
    if value is None or value != value or not -MAX_READING <= value <= MAX_READING:
        return None
    return value


def printed(text: Optional[str]) -> Optional[float]:
    """The leading number of a value as printed, however large (infinity for 400 digits).

    For a check that names an absurd figure (`smi.card_memory_mib`); every
    other reader takes `number`, which keeps only real readings.
    """
    value = clean(text)
    if value is None:
        return None
    match = _NUMBER.match(value)
    return float(match.group(1)) if match else None  # 400 digits: inf, never an exception


def number(text: Optional[str]) -> Optional[float]:
    """The leading number of a value such as `19968 MiB`, `24 C`, `3.97 W`, else None.

    None, too, for a figure no hardware reports (see `finite`).
    """
    return finite(printed(text))


def whole(text: Optional[str]) -> Optional[int]:
    """Like `number`, rounded to an int (MiB, %, counts)."""
    value = number(text)
    return None if value is None else round(value)


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
