"""What may be typed into each field of the console, as Textual `Validator`s.

Every rule comes from the core: a number's bounds from the step's own
pydantic field (`ServeArgs.context`, `PlanArgs.concurrency` …), the replica
name's pattern from `ServeArgs.name`, the environment from the engines'
allowlist, a command from the command table. A field whose value breaks its
rule turns red at once (Textual's `-invalid`) and says why on its border
(`CheckedInput`); its screen refuses Enter or Next with that reason.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from textual.validation import ValidationResult, Validator
from textual.widgets import Input

MAX_DIGITS = 12
"""A whole number typed with more digits than this is refused before it is read (`1e309`,
400-digit integers); every bound the steps set is far below it."""
DIGITS = r"[0-9]*"
r"""What a whole-number field lets be typed. Not Textual's `type="integer"`: its pattern
`[-+]?(?:\d*|\d+_)*` backtracks exponentially once a run of digits is followed by anything
else (32 digits and a letter held the console for minutes in Textual 8.2.8)."""
MAX_TEXT = 512
"""The longest model reference, path or filter a field takes."""


def control_refusal(text: str) -> str | None:
    """Why `text` cannot be taken as one line of plain text, or None.

    Control characters (NUL, escape, newlines) and the marks that reorder
    text on screen (right-to-left overrides, isolates) are refused: they
    would make what is shown differ from what is used.
    """
    for char in text:
        category = unicodedata.category(char)
        if category in ("Cc", "Cf", "Zl", "Zp"):
            return f"it holds the invisible character U+{ord(char):04X}: type plain text"
    return None


class Checked(Validator):
    """A validator from a function that says why a value is refused, or None."""

    def __init__(self, refusal: Callable[[str], str | None]) -> None:
        super().__init__()
        self._refusal = refusal

    def validate(self, value: str) -> ValidationResult:
        """Valid when the function has nothing to say."""
        why = self._refusal(value)
        return self.success() if why is None else self.failure(why, value)


def _field_bounds(model: type[Any], name: str) -> tuple[int, int]:
    """The smallest and largest whole number a step's field takes (`ge`/`gt`, `le`/`lt`)."""
    low, high = 0, 10**MAX_DIGITS - 1
    for rule in model.model_fields[name].metadata:
        if getattr(rule, "ge", None) is not None:
            low = int(rule.ge)
        if getattr(rule, "gt", None) is not None:
            low = int(rule.gt) + 1
        if getattr(rule, "le", None) is not None:
            high = int(rule.le)
        if getattr(rule, "lt", None) is not None:
            high = int(rule.lt) - 1
    return low, high


def whole_number(model: type[Any], name: str, what: str, *, optional: bool = False) -> Checked:
    """A validator of a whole number within the bounds of `model`'s field `name`.

    `what` names the field in the sentence; `optional` lets it be left empty.
    """
    low, high = _field_bounds(model, name)

    def refusal(text: str) -> str | None:
        value = text.strip()
        if not value:
            return None if optional else f"{what}: type a whole number from {low} to {high}"
        if not value.isascii() or not value.isdigit() or len(value) > MAX_DIGITS:
            return f"{what}: a whole number from {low} to {high} (not {_shown(value)})"
        if not low <= int(value) <= high:
            return f"{what}: {int(value)} is not between {low} and {high}"
        return None

    return Checked(refusal)


def replica_name_refusal(name: str) -> str | None:
    """Why a replica name cannot be used, or None (the pattern of the `serve` step's `name`)."""
    from llmgw_core.script.steps.serve import ServeArgs

    if not name:
        return "name: type a name"
    pattern = next(
        rule.pattern
        for rule in ServeArgs.model_fields["name"].metadata
        if getattr(rule, "pattern", None)
    )
    if re.fullmatch(pattern, name) is None:
        return (
            "name: letters, digits, . _ - (64 at most), starting with a letter or digit"
            f" (not {_shown(name)})"
        )
    return None


def key_env_refusal(text: str) -> str | None:
    """Why the key field cannot be used, or None (empty: no key): the name of a variable set
    in this console's environment, read by the `serve` step's rule (`operator_key`)."""
    from llmgw_core.errors import BadInput
    from llmgw_core.serve.keys import ENV_NAME, operator_key

    name = text.strip()
    if not name:
        return None
    if re.fullmatch(ENV_NAME, name) is None:
        return (
            f"key: a variable's name: letters, digits and _, not first a digit (not {_shown(name)})"
        )
    try:
        operator_key(name, "the replica's key")
    except BadInput as exc:  # the core's finding, this field's remedy
        return f"key: {exc.message}: export it before starting the console, or empty this field"
    return None


def env_lines(text: str) -> dict[str, str]:
    """`KEY=VALUE` entries apart by spaces, by the core's rule (`parse_env_text`).

    Raises:
        BadInput: an entry without `=`, or a refused variable (naming each).
    """
    from llmgw_core.engines.allowlist import parse_env_text

    return parse_env_text(text)


def env_refusal(text: str) -> str | None:
    """Why the environment field cannot be used, or None (the engines' allowlist)."""
    from llmgw_core.errors import BadInput

    try:
        env_lines(text)
    except BadInput as exc:
        return f"environment: {exc.sentence()}"
    return None


def adapters_refusal(text: str) -> str | None:
    """Why the adapters field cannot be read as `NAME=PATH …`, or None (the files are read when
    the preview is made)."""
    from llmgw_core.errors import BadInput
    from llmgw_core.serve.adapters import parse_adapter_entries

    try:
        parse_adapter_entries(text)
    except BadInput as exc:
        return exc.sentence()
    return None


def model_ref_refusal(text: str) -> str | None:
    """Why a model reference cannot be used, or None (an empty one is only not yet typed)."""
    value = text.strip()
    if len(value) > MAX_TEXT:
        return f"model: {len(value)} characters is too long for a model reference"
    why = control_refusal(value)
    return f"model: {why}" if why else None


def save_path_refusal(text: str) -> str | None:
    """Why the logs cannot be saved to `text`, or None (checked again when written)."""
    value = text.strip()
    if not value:
        return "path: type where to save the lines"
    if len(value) > MAX_TEXT:
        return f"path: {len(value)} characters is too long"
    why = control_refusal(value)
    if why:
        return f"path: {why}"
    path = Path(value).expanduser()
    if path.is_dir():
        return f"path: {path} is a folder: name a file in it"
    if not path.parent.is_dir():
        return f"path: there is no folder {path.parent}"
    return None


def filter_refusal(text: str) -> str | None:
    """Why a `/` filter cannot be used, or None."""
    if len(text) > MAX_TEXT:
        return f"filter: {len(text)} characters is too long"
    why = control_refusal(text)
    return f"filter: {why}" if why else None


def prompt_refusal(text: str) -> str | None:
    """Why a prompt for `ask` cannot be sent, or None."""
    why = control_refusal(text)
    return f"prompt: {why}" if why else None


def command_refusal(text: str) -> str | None:
    """Why a `:` command line cannot run, or None; a known command half typed is not refused."""
    from llmgw_tui.commands import COMMANDS, CommandError, parse_command

    word = text.strip().removeprefix(":").strip()
    typing_a_name = " " not in word and any(
        name.startswith(word.lower()) for command in COMMANDS for name in command.names
    )
    if not word or typing_a_name:
        return None
    try:
        parse_command(text)
    except CommandError as error:
        return str(error)
    return None


class CheckedInput(Input):
    """An input whose refused value says why on its own border, in red, as it is typed."""

    def validate(self, value: str) -> ValidationResult | None:
        """Textual's validation (the `-invalid` class), and the first reason on the border."""
        result = super().validate(value)
        if result is not None and not result.is_valid:
            self.border_subtitle = first_reason(result.failure_descriptions)
        else:
            self.border_subtitle = ""
        return result


def number_input(
    model: type[Any],
    name: str,
    what: str,
    *,
    id: str,
    classes: str | None = None,
    value: str = "",
    placeholder: str = "",
    optional: bool = False,
) -> CheckedInput:
    """A whole-number field: digits only, within the bounds of `model`'s field `name`."""
    return CheckedInput(
        value=value,
        placeholder=placeholder,
        id=id,
        classes=classes,
        restrict=DIGITS,
        validators=[whole_number(model, name, what, optional=optional)],
    )


def reason(field: Input) -> str | None:
    """Why `field`'s value is refused now, or None (its validators, run again)."""
    result = field.validate(field.value)
    if result is None or result.is_valid:
        return None
    return first_reason(result.failure_descriptions)


def first_reason(descriptions: Sequence[str]) -> str:
    """The first of a validation's reasons (each validator gives one)."""
    return descriptions[0] if descriptions else "this value is refused"


def _shown(value: str) -> str:
    """A typed value as a sentence can quote it: one line, at most 24 characters."""
    shown = value if len(value) <= 24 else value[:21] + "…"
    return repr(shown)


__all__ = [
    "DIGITS",
    "Checked",
    "CheckedInput",
    "command_refusal",
    "control_refusal",
    "env_lines",
    "env_refusal",
    "filter_refusal",
    "model_ref_refusal",
    "number_input",
    "prompt_refusal",
    "reason",
    "replica_name_refusal",
    "save_path_refusal",
    "whole_number",
]
