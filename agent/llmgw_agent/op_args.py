"""The error every protocol operation raises, and typed access to request args.

An op declares its arguments in a table of `Arg`s (type, default, finite
range, list items) and reads them through `checked`: one rule for every op,
so a NaN, a string or a huge number is `bad_args` wherever it is sent.

An operation that cannot do what it was asked raises `OpError(code, message)`;
the protocol turns it into `{"ok": false, "error": {"code", "message"}}`.
The codes are part of the wire contract (see `protocol.py`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple


class OpError(Exception):
    """An operation refused or failed, with a wire code and a sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_MISSING = object()


def _type_names(types: Tuple[type, ...]) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    names.update({list: "a list", dict: "an object"})
    return " or ".join(names.get(kind, kind.__name__) for kind in types)


def arg(args: dict, name: str, types: Tuple[type, ...], default: Any = _MISSING) -> Any:
    """`args[name]` checked against `types`; the default when absent (or required).

    Booleans are not accepted where numbers are asked for (JSON `true` is not 1).

    Raises:
        OpError: `bad_args` when the value is missing or of the wrong type.
    """
    if name not in args or args[name] is None:
        if default is _MISSING:
            raise OpError("bad_args", "argument {!r} is required".format(name))
        return default
    value = args[name]
    if isinstance(value, bool) and bool not in types:
        raise OpError("bad_args", "argument {!r} must be {}".format(name, _type_names(types)))
    if not isinstance(value, types):
        raise OpError("bad_args", "argument {!r} must be {}".format(name, _type_names(types)))
    return value


def number_arg(
    args: dict,
    name: str,
    default: Any = _MISSING,
    minimum: float = 0.0,
    maximum: Optional[float] = None,
) -> Any:
    """A number argument within `[minimum, maximum]`.

    Raises:
        OpError: `bad_args` when missing, not a number, or out of range.
    """
    value = arg(args, name, (int, float), default)
    if value is None:
        return None
    if value != value or value in (float("inf"), float("-inf")):
        raise OpError("bad_args", "argument {!r} must be a finite number".format(name))
    if value < minimum or (maximum is not None and value > maximum):
        bound = "between {} and {}".format(minimum, maximum) if maximum is not None else None
        raise OpError(
            "bad_args",
            "argument {!r} must be {}".format(name, bound or "at least {}".format(minimum)),
        )
    return value


class Arg:
    """One argument of an op, declared: its types, default, range and what a list holds.

    Attributes:
        types: the JSON types taken (`int` never takes a boolean).
        default: the value when absent (`REQUIRED`: it must be given).
        minimum, maximum: the range of a number (finite always).
        items: the types a list's items must have.
    """

    def __init__(
        self,
        types: Tuple[type, ...],
        default: Any = _MISSING,
        minimum: Optional[float] = None,
        maximum: Optional[float] = None,
        items: Optional[Tuple[type, ...]] = None,
    ) -> None:
        self.types = types
        self.default = default
        self.minimum = minimum
        self.maximum = maximum
        self.items = items


REQUIRED = _MISSING
"""An `Arg` default: the argument must be given."""


def checked(args: dict, table: Dict[str, Arg]) -> dict:
    """`args` checked against an op's table: every declared argument, typed and in range.

    Raises:
        OpError: `bad_args` naming the first argument that is wrong.
    """
    found = {}
    for name, spec in table.items():
        numeric = int in spec.types or float in spec.types
        if numeric and str not in spec.types:
            value = number_arg(
                {name: args.get(name)} if name in args else {},
                name,
                spec.default,
                spec.minimum if spec.minimum is not None else float("-inf"),
                spec.maximum,
            )
            if value is not None and float not in spec.types and not isinstance(value, int):
                raise OpError("bad_args", "argument {!r} must be an integer".format(name))
        else:
            value = arg(args, name, spec.types, spec.default)
        if spec.items is not None and isinstance(value, list):
            for item in value:
                if (isinstance(item, bool) and bool not in spec.items) or not isinstance(
                    item, spec.items
                ):
                    raise OpError(
                        "bad_args",
                        "argument {!r} must be a list of {}".format(name, _type_names(spec.items)),
                    )
        found[name] = value
    return found
