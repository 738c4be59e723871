"""GRES and TRES strings: how many cards of which type a node has, uses, or a job asks for.

Forms read here, as Slurm 20.11 to 25.x print them:

- a node's `Gres=` / `gres`: `gpu:h100:8`, `gpu:h100:8(S:0-1)`, `gpu:4`, `gpu:a100:4,nvme:1`,
  `gpu:h100:no_consume:8`, `(null)`;
- a node's `GresUsed=` / `gres_used`: `gpu:h100:2(IDX:0-1)`, `gpu:(null):0(IDX:N/A)`, `gpu:0`;
- a job's `GRES=` detail / `gres_detail`: `gpu:h100:2(IDX:0-1)`;
- TRES (`AllocTRES=`, `tres_used`, `TRES=`): `cpu=1,mem=1000M,gres/gpu=2,gres/gpu:h100=2`;
- a job's request (`TresPerNode=`, `tres_per_node`): `gres:gpu:h100:8` (to 22.05),
  `gres/gpu:h100=8` and `gres/gpu:8` (23.02 on).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from llmgw_core.errors import shown_value
from llmgw_core.slurm.text import NO_VALUE, SlurmOutputUnreadable

MAX_CARDS = 1_000_000
"""More cards than one node or one job ever holds: a larger count is not a count."""
_INDEX = re.compile(r"^\(?IDX:([0-9,\-]+|N/A)\)?$")


class GresCount(BaseModel):
    """Cards of one GRES name and type: `gpu:h100:8` is name gpu, type h100, count 8.

    Attributes:
        name: the GRES name (`gpu`; a site may call its cards otherwise, see `gres_name`).
        type: the type as the site declared it (`h100`, `a100_80g`); "" when untyped.
        count: how many.
        indices: the cards' indices on the node where Slurm printed them (`IDX:0-1`).
    """

    model_config = ConfigDict(frozen=True)

    name: str
    type: str = ""
    count: int
    indices: tuple[int, ...] = ()


def split_outside_parentheses(text: str) -> list[str]:
    """`a:1(IDX:0,2),b:2` → [`a:1(IDX:0,2)`, `b:2`]: commas inside parentheses are an index list's."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def read_gres(text: str, what: str) -> tuple[GresCount, ...]:
    """Every entry of a GRES string (`gpu:h100:8(S:0-1),nvme:1`), in order.

    Raises:
        SlurmOutputUnreadable: an entry whose count is not a count.
    """
    if not isinstance(text, str):
        raise SlurmOutputUnreadable(f"{what} is {shown_value(text)}, not text")
    if text.strip() in NO_VALUE:
        return ()
    return tuple(_entry(part, what) for part in split_outside_parentheses(text))


def _entry(part: str, what: str) -> GresCount:
    head, _, detail = part.replace("(null)", "").partition("(")
    fields = [field for field in head.split(":") if field != "no_consume"]
    if len(fields) < 2 or not fields[0]:
        raise SlurmOutputUnreadable(f"{what} holds {shown_value(part)}, not NAME[:TYPE]:COUNT")
    name, count_text = fields[0], fields[-1]
    kind = ":".join(fields[1:-1])
    count = _count(count_text, part, what)
    indices = _indices("(" + detail, part, what) if detail else ()
    return GresCount(name=name, type="" if kind in NO_VALUE else kind, count=count, indices=indices)


_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def _count(text: str, part: str, what: str) -> int:
    match = re.match(r"^(\d{1,12})([KMG]?)$", text)
    if match is None:
        raise SlurmOutputUnreadable(
            f"{what} holds {shown_value(part)}, whose count is not a number"
        )
    count = int(match.group(1)) * _SUFFIX[match.group(2)]
    if count > MAX_CARDS * 1024**3:
        raise SlurmOutputUnreadable(f"{what} holds {shown_value(part)}, an absurd count")
    return count


def _indices(detail: str, part: str, what: str) -> tuple[int, ...]:
    """`(IDX:0-1,4)` → (0, 1, 4); a socket binding `(S:0-1)` or `(IDX:N/A)` holds none."""
    inner = detail.strip()
    if not inner.startswith("(IDX:"):
        return ()
    match = _INDEX.match(inner)
    if match is None:
        raise SlurmOutputUnreadable(f"{what} holds {shown_value(part)}, whose IDX list is not one")
    if match.group(1) == "N/A":
        return ()
    found: list[int] = []
    for piece in match.group(1).split(","):
        low, _, high = piece.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise SlurmOutputUnreadable(
                f"{what} holds {shown_value(part)}, whose IDX list is not one"
            )
        first, last = int(low), int(high or low)
        if last < first or last - first >= MAX_CARDS:
            raise SlurmOutputUnreadable(
                f"{what} holds {shown_value(part)}, whose IDX range is not one"
            )
        found += range(first, last + 1)
    return tuple(found)


def cards(entries: tuple[GresCount, ...], gres_name: str) -> tuple[GresCount, ...]:
    """The entries that are the site's GPUs (`gres_name`, usually `gpu`)."""
    return tuple(entry for entry in entries if entry.name == gres_name)


def read_tres(text: str, what: str) -> dict[str, str]:
    """A TRES string as `{"cpu": "1", "mem": "1000M", "gres/gpu": "2", "gres/gpu:h100": "2"}`.

    Raises:
        SlurmOutputUnreadable: an entry that is not KEY=VALUE.
    """
    if not isinstance(text, str):
        raise SlurmOutputUnreadable(f"{what} is {shown_value(text)}, not text")
    found: dict[str, str] = {}
    if text.strip() in NO_VALUE:
        return found
    for part in text.split(","):
        key, equals, value = part.strip().partition("=")
        if not equals or not key:
            raise SlurmOutputUnreadable(f"{what} holds {shown_value(part)}, not KEY=VALUE")
        found[key] = value
    return found


def tres_cards(tres: dict[str, str], gres_name: str, what: str) -> int | None:
    """The cards a TRES string counts (`gres/gpu=2`); None when it does not count them."""
    value = tres.get(f"gres/{gres_name}")
    if value is None:
        return None
    return _count(value, f"gres/{gres_name}={value}", what)


def requested_per_node(text: str, gres_name: str, what: str) -> GresCount | None:
    """What a job asks of each node in `TresPerNode` / `tres_per_node`, whichever version
    wrote it: `gres:gpu:h100:8`, `gres/gpu:h100=8`, `gres/gpu=8`, `gres/gpu:8`, `gpu:h100:8`.
    None when the job asks for no `gres_name`.

    Raises:
        SlurmOutputUnreadable: a request for `gres_name` whose count is not a count.
    """
    if not isinstance(text, str):
        raise SlurmOutputUnreadable(f"{what} is {shown_value(text)}, not text")
    for part in split_outside_parentheses(text):
        if part in NO_VALUE:
            continue
        entry = part
        for prefix in ("gres:", "gres/"):
            entry = entry.removeprefix(prefix)
        entry = entry.replace("=", ":")
        if entry.split(":", 1)[0] != gres_name:
            continue
        return _entry(entry, what)
    return None
