"""The strict reading every document we take from an operator gets (a script's steps, a service).

Unknown keys are refused, not ignored (a misspelt `contxt:` would otherwise
be dropped in silence), and YAML's `true` is not the number 1.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)


def _model_reference(ref: str) -> str:
    """A model reference as a script may give one: no NUL, newline or other control character
    (a path holding one cannot be opened, and a Hub id never does)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in ref):
        raise ValueError("holds a control character (a NUL, a newline …): no model is named so")
    if len(ref) > 4096:
        raise ValueError("is longer than any path or Hub id")
    return ref


ModelRef = Annotated[str, Field(min_length=1), AfterValidator(_model_reference)]
"""The `model:` of every step that names one: `catalog:…`, a Hub `org/name[@rev]`, a path."""

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
"""A replica's, a gateway's or a service's name: a token the nodes can file things under."""


def _takes_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_takes_bool(inner) for inner in get_args(annotation))


class StrictArgs(BaseModel):
    """A document's fields: unknown keys are refused, not ignored.

    YAML's `true` is not the number 1: a boolean given where a number or a
    name is asked for is refused rather than quietly read as 1.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, raw: Any) -> Any:
        if isinstance(raw, dict):
            for name, value in raw.items():
                field_info = cls.model_fields.get(name) if isinstance(name, str) else None
                if (
                    isinstance(value, bool)
                    and field_info is not None
                    and not _takes_bool(field_info.annotation)
                ):
                    raise ValueError(f"{name} is {str(value).lower()}, not a number or a name")
        return raw


def validation_sentence(error: ValidationError) -> str:
    """What pydantic refused, as one sentence naming each field: `context must be > 0`."""
    parts = []
    for item in error.errors():
        # A tagged union's tag (`Bounds`, a class name) is not where the operator wrote it.
        where = ".".join(str(p) for p in item["loc"] if not str(p)[:1].isupper())
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "is not a known argument"
        elif item["type"] == "missing":
            message = "is required"
        parts.append(f"{where} {message}" if where else message)
    return "; ".join(parts)


Args = TypeVar("Args", bound=BaseModel)


def checked_args(model: type[Args], given: dict[str, Any]) -> Args:
    """`given` read as `model` (a step's arguments, a service document), as a script's are.

    Raises:
        BadInput: what is refused, in `validation_sentence`'s words.
    """
    from llmgw_core.errors import BadInput

    try:
        return model.model_validate(given)
    except ValidationError as exc:
        raise BadInput(validation_sentence(exc)) from None
