"""Slurm's host lists: `h100-[1-3,5]`, `gpu[001-016]`, `rack[1-2]-node[01-02]`.

Slurm writes every set of nodes this way (a job's `NodeList`, `sinfo`'s `%N`, a GRES
detail's `Nodes=`) and takes it back in `--nodelist`. `expand_hostlist` is the one reader;
`hostlist_text` writes a list back in the same syntax.
"""

from __future__ import annotations

import re
from itertools import product

from llmgw_core.errors import shown_value
from llmgw_core.slurm.text import SlurmOutputUnreadable

MAX_HOSTS = 100_000
"""More names than any cluster has: `node[0-999999999]` is refused, not expanded."""
_NAME_CHARS = re.compile(r"^[A-Za-z0-9._-]*$")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_hostlist(text: str, what: str = "the host list") -> list[str]:
    """Every name of a host list, in the order written (duplicates kept as written).

    Commas separate names outside brackets and ranges inside them; a range keeps the
    width of its first bound (`[08-10]` is 08, 09, 10); several bracket groups in one name
    are a product (`r[1-2]n[1-2]` is r1n1, r1n2, r2n1, r2n2). "" and `(null)` are no names.

    Raises:
        SlurmOutputUnreadable: unbalanced brackets, a backwards or non-numeric range, a
            character no host name holds, or more than `MAX_HOSTS` names.
    """
    if not isinstance(text, str):
        raise SlurmOutputUnreadable(f"{what} is {shown_value(text)}, not text")
    text = text.strip()
    if text in ("", "(null)", "None"):
        return []
    names: list[str] = []
    for item in _top_level_items(text, what):
        names += _expand_item(item, what, MAX_HOSTS - len(names))
    return names


def _top_level_items(text: str, what: str) -> list[str]:
    items, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise SlurmOutputUnreadable(f"{what} {shown_value(text)} nests a bracket")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise SlurmOutputUnreadable(
                    f"{what} {shown_value(text)} closes a bracket it never opened"
                )
        elif char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    if depth:
        raise SlurmOutputUnreadable(f"{what} {shown_value(text)} leaves a bracket open")
    items.append(text[start:])
    if any(not item for item in items):
        raise SlurmOutputUnreadable(f"{what} {shown_value(text)} holds an empty name")
    return items


def _expand_item(item: str, what: str, room: int) -> list[str]:
    parts = re.split(r"\[([^\]]*)\]", item)
    fixed, groups = parts[0::2], parts[1::2]
    for piece in fixed:
        if not _NAME_CHARS.match(piece):
            raise SlurmOutputUnreadable(f"{what} holds {shown_value(item)}, not a host name")
    choices = [_expand_group(group, item, what, room) for group in groups]
    total = 1
    for choice in choices:
        total *= len(choice)
    if total > room:
        raise SlurmOutputUnreadable(f"{what} names more than {MAX_HOSTS:,} hosts")
    names = []
    for picked in product(*choices):
        name = fixed[0]
        for index, value in enumerate(picked):
            name += value + fixed[index + 1]
        names.append(name)
    return names


def _expand_group(group: str, item: str, what: str, room: int) -> list[str]:
    values: list[str] = []
    for piece in group.split(","):
        match = _RANGE.match(piece.strip())
        if match is None:
            raise SlurmOutputUnreadable(
                f"{what} {shown_value(item)} holds the range {shown_value(piece)}, "
                "not a number or two joined by '-'"
            )
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        low, high = int(low_text), int(high_text)
        if high < low:
            raise SlurmOutputUnreadable(
                f"{what} {shown_value(item)} holds a backwards range {piece}"
            )
        if high - low + 1 > room - len(values):
            raise SlurmOutputUnreadable(f"{what} names more than {MAX_HOSTS:,} hosts")
        width = len(low_text) if low_text.startswith("0") else 0
        values += [str(number).zfill(width) for number in range(low, high + 1)]
    return values


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def hostlist_text(names: list[str] | tuple[str, ...]) -> str:
    """Names as one host list, runs of numbers folded into ranges (`h100-[1-3],cpu-1`).

    The order of first appearance of each prefix is kept, and numbers are sorted
    within a prefix; `expand_hostlist` of the result holds the same set of names.
    """
    groups: dict[tuple[str, int], list[int]] = {}
    plain: dict[str, None] = {}
    order: list[tuple[str, int] | str] = []
    for name in dict.fromkeys(names):
        match = _NUMBERED.match(name)
        if match is None:
            plain[name] = None
            order.append(name)
            continue
        prefix, digits = match.group(1), match.group(2)
        key = (prefix, len(digits))  # 08, 09 and 10 share a width: gpu[08-10]
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(digits))
    items = []
    for entry in order:
        if isinstance(entry, str):
            items.append(entry)
            continue
        prefix, width = entry
        numbers = sorted(groups[entry])
        if len(numbers) == 1:
            items.append(f"{prefix}{str(numbers[0]).zfill(width)}")
            continue
        ranges = []
        start = previous = numbers[0]
        for number in [*numbers[1:], None]:
            if number is not None and number == previous + 1:
                previous = number
                continue
            low, high = str(start).zfill(width), str(previous).zfill(width)
            ranges.append(low if start == previous else f"{low}-{high}")
            if number is not None:
                start = previous = number
        items.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(items)
