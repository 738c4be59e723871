"""The error every protocol operation raises, and typed access to request args.

An operation that cannot do what it was asked raises `OpError(code, message)`;
the protocol turns it into `{"ok": false, "error": {"code", "message"}}`.
The codes are part of the wire contract (see `protocol.py`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Optional, Tuple


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
