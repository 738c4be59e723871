"""What the operator may write for a Slurm option: names, a feature constraint, a time limit.

Each check takes the text and returns it, or raises `ValueError` with the end of a sentence
("must be …"), so the inventory's pydantic models and the commands share one rule each.
Every value that passes is a single shell word with no quoting needed, but the commands
quote it anyway where a remote shell reads it.
"""

from __future__ import annotations

import re

SLURM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
"""A partition, account, QoS or reservation name (`gpu`, `ml-team`, `normal`, `llm_2026`)."""
GRES_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
_FEATURE = r"[A-Za-z0-9_][A-Za-z0-9_.:-]*(?:\*\d{1,5})?"
CONSTRAINT = re.compile(rf"^(?:[\[(]*!?{_FEATURE}[\])]*)(?:[&|,](?:[\[(]*!?{_FEATURE}[\])]*))*$")
"""A `--constraint` expression: features joined by `&` (and), `|` (or), `,` (and, old form),
grouped by `[]` or `()`, a count as `h100*2`."""
_TIME = re.compile(
    r"^(?:(?P<days>\d{1,4})-(?P<dh>\d{1,2})(?::(?P<dm>\d{1,2})(?::(?P<ds>\d{1,2}))?)?"
    r"|(?P<a>\d{1,7})(?::(?P<b>\d{1,2})(?::(?P<c>\d{1,2}))?)?)$"
)


def check_slurm_name(text: str) -> str:
    """A partition, account, QoS or reservation name, or a comma list of partitions."""
    for part in text.split(","):
        if not SLURM_NAME.match(part):
            raise ValueError(
                "must be a Slurm name of letters, digits, '_', '.', '+' or '-' "
                "(not starting with '-'), or a comma list of them"
            )
    return text


def check_gres_name(text: str) -> str:
    """The GRES name the site gives its cards (`gpu`)."""
    if not GRES_NAME.match(text):
        raise ValueError("must be a GRES name such as gpu (a letter, then letters, digits or '_')")
    return text


def check_constraint(text: str) -> str:
    """A feature constraint as `sbatch --constraint` takes it (`h100&nvlink`, `[rack1|rack2]`)."""
    if (
        len(text) > 1024
        or not CONSTRAINT.match(text)
        or text.count("[") != text.count("]")
        or text.count("(") != text.count(")")
    ):
        raise ValueError(
            "must be a feature expression such as h100&nvlink or [rack1|rack2] "
            "(features joined by &, | or ',', grouped by [] or ())"
        )
    return text


def time_limit_minutes(text: str) -> int | None:
    """A time limit as Slurm writes it, in minutes (rounded up); None for `UNLIMITED`.

    Forms: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`, `UNLIMITED`/`INFINITE`.

    Raises:
        ValueError: any other text, or minutes or seconds past 59, hours past 23.
    """
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    match = _TIME.match(text)
    if match is None:
        raise ValueError(
            "must be a Slurm time limit: MINUTES, HH:MM:SS, D-HH, D-HH:MM:SS or UNLIMITED"
        )
    if match["days"] is not None:
        days, hours = int(match["days"]), int(match["dh"])
        minutes, seconds = int(match["dm"] or 0), int(match["ds"] or 0)
        if hours > 23:
            raise ValueError("must not have more than 23 hours after the days")
    elif match["c"] is not None:
        days, hours, minutes, seconds = 0, int(match["a"]), int(match["b"]), int(match["c"])
    else:
        days, hours, minutes, seconds = 0, 0, int(match["a"]), int(match["b"] or 0)
    bounded_minutes = match["dm"] is not None or match["c"] is not None
    if seconds > 59 or (bounded_minutes and minutes > 59):
        raise ValueError("must not have more than 59 minutes or seconds in a field")
    total_seconds = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total_seconds == 0:
        raise ValueError("must be longer than 0 minutes (write UNLIMITED for no limit)")
    return -(-total_seconds // 60)


def check_time_limit(text: str) -> str:
    """The time limit as written, once `time_limit_minutes` has read it."""
    time_limit_minutes(text)
    return text
