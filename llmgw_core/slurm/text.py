"""What every Slurm reader shares: the error it raises, the one-line `key=value` records of
`scontrol -o`, JSON documents, and Slurm's ways of writing "no value"."""

from __future__ import annotations

import json
import re
from typing import Any

from llmgw_core.errors import BadInput, shown_value

MAX_OUTPUT_CHARS = 50_000_000
"""A node or job listing larger than this is not a listing (50 MB holds ~100,000 nodes)."""
NO_VALUE = frozenset({"", "(null)", "N/A", "n/a", "None", "none", "Unknown"})
"""How Slurm's text output writes a value that is not set."""

_KEY = re.compile(r"(?:^|\s)([A-Z][A-Za-z0-9_:/]*)=")
"""A key of `scontrol -o`: `NodeName`, `CPUs/Task`, `AllocNode:Sid`, `ReqB:S:C:T`, `MCS_label`."""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class SlurmOutputUnreadable(BadInput, ValueError):
    """A Slurm command printed something its reader cannot take: another version's format,
    a truncated or hostile value. One sentence naming the command's output and the value."""


def checked_text(text: object, source: str) -> str:
    """The output as text, refused when it is not text, too large or holds control bytes.

    Raises:
        SlurmOutputUnreadable: naming `source`.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise SlurmOutputUnreadable(f"{source} is not UTF-8 text") from None
    if not isinstance(text, str):
        raise SlurmOutputUnreadable(f"{source} is {shown_value(text)}, not text")
    if len(text) > MAX_OUTPUT_CHARS:
        raise SlurmOutputUnreadable(f"{source} is larger than {MAX_OUTPUT_CHARS:,} characters")
    if _CONTROL.search(text):
        raise SlurmOutputUnreadable(f"{source} holds a control character")
    return text


def one_line_records(text: str, source: str) -> list[list[tuple[str, str]]]:
    """Each non-empty line of `scontrol -o show …` as its `(key, value)` pairs, in order.

    A value runs to the next ` Key=`; keys repeat where Slurm repeats them (a job's
    per-node `Nodes= CPU_IDs= Mem= GRES=` groups under `-d`). A node's `Reason=` is read up
    to its `[user@time]` stamp, because a reason is free text and may hold `Word=`.

    Raises:
        SlurmOutputUnreadable: a line that does not start with a key.
    """
    records = []
    for number, line in enumerate(checked_text(text, source).splitlines(), start=1):
        if not line.strip():
            continue
        records.append(_pairs(line.strip(), f"{source}, line {number}"))
    return records


_STAMPED_REASON = re.compile(r"(?:^|\s)Reason=(.*?) \[([^\]\s@]*@[0-9T:.-]+)\](?=\s|$)")


def _pairs(line: str, where: str) -> list[tuple[str, str]]:
    reason = _STAMPED_REASON.search(line)
    tail: list[tuple[str, str]] = []
    if reason is not None:
        tail = [("Reason", reason.group(1).strip()), ("ReasonStamp", reason.group(2))]
        rest = line[reason.end() :]
        line = line[: reason.start()]
        after = _pairs(rest.strip(), where) if rest.strip() else []
        tail += after
    matches = list(_KEY.finditer(line))
    if line and (not matches or matches[0].start() != 0):
        raise SlurmOutputUnreadable(
            f"{where} does not start with a Key=value pair (it starts {shown_value(line[:40])})"
        )
    pairs = []
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        pairs.append((match.group(1), line[match.end() : end].strip()))
    return pairs + tail


def first_values(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """The pairs as a dict, each key with its first value (repeated keys are per-node detail)."""
    found: dict[str, str] = {}
    for key, value in pairs:
        found.setdefault(key, value)
    return found


def one_line_fields(
    text: str, source: str, first_key: str, command: str
) -> list[tuple[list[tuple[str, str]], dict[str, str]]]:
    """Each record of a one-line listing (`scontrol -o …`): its pairs, and its first values.

    Raises:
        SlurmOutputUnreadable: a record that does not start with `first_key` (the listing
            is not `command`'s).
    """
    records = []
    for pairs in one_line_records(text, source):
        fields = first_values(pairs)
        if first_key not in fields:
            first = pairs[0][0] if pairs else "nothing"
            raise SlurmOutputUnreadable(
                f"{source} holds a record that starts with {shown_value(first)}, not {first_key}",
                f"pass the output of `{command}`",
            )
        records.append((pairs, fields))
    return records


def json_document(text: str, source: str, list_key: str) -> list[Any]:
    """The list under `list_key` of a Slurm JSON document (`{"meta", "errors", list_key}`).

    Raises:
        SlurmOutputUnreadable: not JSON, not an object, no such list, or errors reported.
    """
    text = checked_text(text, source)
    try:
        document = json.loads(text)
    except RecursionError:
        raise SlurmOutputUnreadable(f"{source} is nested too deeply to be Slurm's JSON") from None
    except ValueError as exc:
        raise SlurmOutputUnreadable(f"{source} is not JSON ({exc.args[0]})") from None
    if not isinstance(document, dict):
        raise SlurmOutputUnreadable(f"{source} is {shown_value(document)}, not a JSON object")
    errors = document.get("errors")
    if isinstance(errors, list) and errors:
        first = errors[0]
        said = first.get("error", first.get("description")) if isinstance(first, dict) else first
        raise SlurmOutputUnreadable(f"{source} reports an error: {shown_value(said)}")
    listed = document.get(list_key)
    if not isinstance(listed, list):
        keys = ", ".join(sorted(str(key) for key in document)[:6]) or "nothing"
        raise SlurmOutputUnreadable(
            f"{source} has no {list_key!r} list (it holds {shown_value(keys)})"
        )
    return listed


def number_or_none(value: Any, what: str) -> int | None:
    """A count as Slurm's JSON writes it: a number, or (from 23.02 on) a
    `{"set", "infinite", "number"}` object; None when unset or infinite.

    Raises:
        SlurmOutputUnreadable: anything else, or a negative or absurd count.
    """
    if isinstance(value, dict):
        if value.get("set") is False or value.get("infinite") is True:
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SlurmOutputUnreadable(f"{what} is {shown_value(value)}, not a number")
    if value != value or not 0 <= value < 2**63:
        raise SlurmOutputUnreadable(f"{what} is {shown_value(value)}, not a count")
    return int(value)


def count_text(text: str, what: str) -> int | None:
    """A count as Slurm's text writes it (`64000`, `N/A`); None when not set.

    Raises:
        SlurmOutputUnreadable: anything but digits.
    """
    if text in NO_VALUE:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise SlurmOutputUnreadable(f"{what} is {shown_value(text)}, not a count")
    return int(text)


def words(value: Any, what: str) -> tuple[str, ...]:
    """A comma list, written as one string (`h100,nvlink`) or as a JSON list of strings."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip() not in NO_VALUE)
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        return tuple(part for part in value if part not in NO_VALUE)
    raise SlurmOutputUnreadable(f"{what} is {shown_value(value)}, not a list of names")


def text_or_empty(value: Any, what: str) -> str:
    """A string field of Slurm's JSON; "" for null or Slurm's no-value words."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SlurmOutputUnreadable(f"{what} is {shown_value(value)}, not text")
    return "" if value in NO_VALUE else value
