"""A capture's files read by their schema: every JSON field checked before it is used.

A capture directory is written by `llmgw doctor --capture`, by the simulator's
profiles, or by hand for a bug report, and any of them can hold
`"mounts": 5` or `"engines": ["vllm"]`. Each file is read here (`read_text`:
bounded, never blocking on a pipe), each JSON document parsed here
(`parse_json`: no NaN, no Infinity, no number beyond any machine's, no
recursion error), and each value read by a *shape*: an object whose `read`
returns the typed value or raises `CaptureError` naming the file and the
field. What a shape returns is what the facts carry, so nothing downstream
meets a number where a list belongs.

    MOUNT = Record({"path": Text(), "fs_type": Text()}, required=("path", "fs_type"))
    mounts = ListOf(MOUNT).read(document.get("mounts"), "host.json: mounts")
"""

from __future__ import annotations

import json

from llmgw_agent.discover.fields import MAX_READING

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Dict, Iterable, List, Optional, Tuple

MAX_CAPTURE_BYTES = 64 * 1024 * 1024
"""No tool writes more than this (a 72-GPU rack's `nvidia-smi -q -x` is under 2 MiB)."""
MAX_TEXT_CHARS = 4096
"""The longest string a capture field holds (a path, a version, a reason)."""
MAX_ITEMS = 65536
"""The most entries a list or object of a capture holds (mounts, engines, GPUs)."""


class CaptureError(ValueError):
    """A capture file, or a field of one, that does not hold what its schema says.

    The message is one sentence that names the file and the field.
    """


class Unusable:
    """A JSON number no field can mean: NaN, an infinity, or more digits than any machine's.

    `parse_json` puts one where the number was, so the document still reads
    and only the field holding it is refused (by every shape, with `shown`).
    """

    def __init__(self, shown: str) -> None:
        self.shown = shown

    def __repr__(self) -> str:
        return "Unusable({!r})".format(self.shown)


def read_text(path: Path) -> Optional[str]:
    """A capture file's text (undecodable bytes replaced); None when there is no such file.

    Raises:
        CaptureError: a file that cannot be read, or larger than any tool writes.
    """
    try:
        if not path.is_file():  # a directory or a named pipe is no capture (a pipe would block)
            return None
        with path.open("rb") as handle:
            raw = handle.read(MAX_CAPTURE_BYTES + 1)
    except OSError as exc:
        raise CaptureError("{} cannot be read ({})".format(path, exc.strerror or exc)) from None
    if len(raw) > MAX_CAPTURE_BYTES:
        raise CaptureError(
            "{} is larger than {} MiB, more than any tool writes: it is not a capture".format(
                path, MAX_CAPTURE_BYTES // (1024 * 1024)
            )
        )
    return raw.decode("utf-8", errors="replace")


def _constant(name: str) -> Unusable:
    return Unusable(name)


def _float(text: str) -> Any:
    value = float(text)
    if value != value or not -MAX_READING <= value <= MAX_READING:
        return Unusable("the number {}".format(_short(text)))
    return value


def _int(text: str) -> Any:
    digits = len(text.lstrip("-"))
    value = int(text) if digits <= 16 else None  # Python 3.11 refuses 4,300 digits: never tried
    if value is None or not -MAX_READING <= value <= MAX_READING:
        return Unusable("a number of {} digits".format(digits))
    return value


def parse_json(text: str, where: str) -> Any:
    """A JSON document, with `Unusable` in place of NaN, infinities and huge numbers.

    Raises:
        CaptureError: text that is not JSON, or nested deeper than the parser goes.
    """
    try:
        return json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except RecursionError:
        raise CaptureError("{} is nested too deeply to be read".format(where)) from None
    except ValueError as exc:
        raise CaptureError("{} is not JSON ({})".format(where, exc)) from None


def read_json(path: Path) -> Tuple[bool, Any]:
    """`(present, document)` of a capture's JSON file; `(False, None)` when there is none.

    Raises:
        CaptureError: unreadable, too large, or not JSON.
    """
    text = read_text(path)
    if text is None:
        return False, None
    return True, parse_json(text, str(path))


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown(value: Any) -> str:
    """How a refused value is named in a sentence: its kind, and a short form of a scalar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Unusable):
        return value.shown
    if isinstance(value, (int, float)):
        return "the number {}".format(_short(repr(value)))
    if isinstance(value, str):
        return "the string {}".format(_short(repr(value), 48))
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "a {}".format(type(value).__name__)


def _child(where: str, name: str) -> str:
    """`host.json: mounts` for a field of the file, `host.json: mounts[0].path` below it."""
    return "{}{}{}".format(where, "." if ": " in where else ": ", name)


def _item(where: str, at: int) -> str:
    return "{}[{}]".format(where, at) if ": " in where else "{}: [{}]".format(where, at)


class Shape:
    """What a value must be; `read` returns it typed or raises `CaptureError`.

    `what` names one such value in a sentence (`a string`), `plural` many
    (`strings`); `takes` says whether a value is of this shape's JSON kind,
    which is how `Either` picks the shape whose sentence to give.
    """

    what = "a value"
    plural = "values"

    def takes(self, value: Any) -> bool:
        """True when `value` is of the JSON kind this shape reads (its range not checked)."""
        return True

    def read(self, value: Any, where: str) -> Any:
        """`value` as this shape has it, `where` naming the file and field for the sentence."""
        raise NotImplementedError

    def refuse(self, value: Any, where: str) -> CaptureError:
        """The error for a value of the wrong shape."""
        return CaptureError("{} must be {}, not {}".format(where, self.what, shown(value)))


class Text(Shape):
    """A string of at most `MAX_TEXT_CHARS`, without control characters (it reaches sentences)."""

    what = "a string"
    plural = "strings"

    def takes(self, value: Any) -> bool:
        return isinstance(value, str)

    def read(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.refuse(value, where)
        if len(value) > MAX_TEXT_CHARS:
            raise CaptureError(
                "{} must be a string of at most {} characters, not {}".format(
                    where, MAX_TEXT_CHARS, len(value)
                )
            )
        if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
            raise CaptureError(
                "{} must not hold a newline or another control character".format(where)
            )
        return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, Unusable)) and not isinstance(value, bool)


class Whole(Shape):
    """An integer from `minimum` to `maximum` (never a boolean: JSON `true` is no count)."""

    def __init__(self, minimum: int, maximum: int) -> None:
        self.minimum, self.maximum = minimum, maximum
        self.what = "a whole number from {} to {}".format(minimum, maximum)
        self.plural = "whole numbers from {} to {}".format(minimum, maximum)

    def takes(self, value: Any) -> bool:
        return _is_number(value)

    def read(self, value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.refuse(value, where)
        if not self.minimum <= value <= self.maximum:
            raise self.refuse(value, where)
        return value


class Real(Shape):
    """A finite number from `minimum` to `maximum`, as a float."""

    def __init__(self, minimum: float, maximum: float) -> None:
        self.minimum, self.maximum = minimum, maximum
        self.what = "a number from {:g} to {:g}".format(minimum, maximum)
        self.plural = "numbers from {:g} to {:g}".format(minimum, maximum)

    def takes(self, value: Any) -> bool:
        return _is_number(value)

    def read(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.refuse(value, where)
        if not self.minimum <= value <= self.maximum:  # NaN never arrives: parse_json holds it
            raise self.refuse(value, where)
        return float(value)


class Flag(Shape):
    """`true` or `false`."""

    what = "true or false"
    plural = "booleans"

    def takes(self, value: Any) -> bool:
        return isinstance(value, bool)

    def read(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.refuse(value, where)
        return value


class OneOf(Shape):
    """One of a few strings."""

    def __init__(self, *choices: str) -> None:
        self.choices = choices
        self.what = "one of {}".format(", ".join(repr(c) for c in choices))
        self.plural = "strings, each {}".format(self.what)

    def takes(self, value: Any) -> bool:
        return isinstance(value, str)

    def read(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or value not in self.choices:
            raise self.refuse(value, where)
        return value


class Maybe(Shape):
    """`null` (None), or what `shape` reads."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.what = "{} or null".format(shape.what)
        self.plural = "{} or nulls".format(shape.plural)

    def takes(self, value: Any) -> bool:
        return value is None or self.shape.takes(value)

    def read(self, value: Any, where: str) -> Any:
        return None if value is None else self.shape.read(value, where)


class Either(Shape):
    """What the first of `shapes` whose JSON kind the value is reads (its sentence if it refuses)."""

    def __init__(self, *shapes: Shape) -> None:
        self.shapes = shapes
        self.what = " or ".join(shape.what for shape in shapes)
        self.plural = " or ".join(shape.plural for shape in shapes)

    def takes(self, value: Any) -> bool:
        return any(shape.takes(value) for shape in self.shapes)

    def read(self, value: Any, where: str) -> Any:
        for shape in self.shapes:
            if shape.takes(value):
                return shape.read(value, where)
        raise self.refuse(value, where)


class ListOf(Shape):
    """A list of at most `MAX_ITEMS` values, each read by `item`."""

    def __init__(self, item: Shape) -> None:
        self.item = item
        self.what = "a list of {}".format(item.plural)
        self.plural = "lists of {}".format(item.plural)

    def takes(self, value: Any) -> bool:
        return isinstance(value, list)

    def read(self, value: Any, where: str) -> List[Any]:
        if not isinstance(value, list):
            raise self.refuse(value, where)
        if len(value) > MAX_ITEMS:
            raise CaptureError(
                "{} must hold at most {} entries, not {}".format(where, MAX_ITEMS, len(value))
            )
        return [self.item.read(entry, _item(where, at)) for at, entry in enumerate(value)]


class MapOf(Shape):
    """An object of at most `MAX_ITEMS` entries: string keys, each value read by `item`."""

    def __init__(self, item: Shape) -> None:
        self.item = item
        self.what = "an object of {}".format(item.plural)
        self.plural = "objects of {}".format(item.plural)

    def takes(self, value: Any) -> bool:
        return isinstance(value, dict)

    def read(self, value: Any, where: str) -> Dict[str, Any]:
        if not isinstance(value, dict):
            raise self.refuse(value, where)
        if len(value) > MAX_ITEMS:
            raise CaptureError(
                "{} must hold at most {} entries, not {}".format(where, MAX_ITEMS, len(value))
            )
        result: Dict[str, Any] = {}
        for key, entry in value.items():
            name = Text().read(key, "{} key".format(where))
            result[name] = self.item.read(entry, _child(where, name))
        return result


class Record(Shape):
    """An object with known fields, each read by its shape; other keys are left unread.

    A field that is absent stays absent (the reader's default applies); one
    in `required` must be there. `read_fields` keeps the good fields of a
    record and reports each bad one, for a file the facts tolerate in part.
    """

    def __init__(
        self,
        fields: Dict[str, Shape],
        required: Iterable[str] = (),
        what: str = "an object",
        plural: str = "objects",
    ) -> None:
        self.fields = fields
        self.required = tuple(required)
        self.what = what
        self.plural = plural

    def takes(self, value: Any) -> bool:
        return isinstance(value, dict)

    def read(self, value: Any, where: str) -> Dict[str, Any]:
        problems: List[str] = []
        result = self.read_fields(value, where, problems)
        if problems:
            raise CaptureError(problems[0])
        return result

    def read_fields(self, value: Any, where: str, problems: List[str]) -> Dict[str, Any]:
        """The fields that read; a sentence in `problems` for each that does not.

        Raises:
            CaptureError: when `value` is not an object at all.
        """
        if not isinstance(value, dict):
            raise self.refuse(value, where)
        result: Dict[str, Any] = {}
        for name in self.required:
            if name not in value:
                problems.append("{} is required".format(_child(where, name)))
        for name, shape in self.fields.items():
            if name not in value:
                continue
            try:
                result[name] = shape.read(value[name], _child(where, name))
            except CaptureError as exc:
                problems.append(str(exc))
        return result
