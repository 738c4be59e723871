"""The one error type every edge turns into a sentence and an exit code.

Domain code raises `LlmgwError` (or a subclass) with a message that names the
thing that went wrong and, where there is one, the fix. The headless runner
prints it and exits 2 (bad input) or 1 (a step failed); the console shows it
as a red line. Nothing else should escape to the user as a traceback.
"""

from __future__ import annotations


class LlmgwError(Exception):
    """A failure with a sentence a person can act on.

    Attributes:
        message: what went wrong, one sentence.
        fix: what to do about it, or "" when there is nothing to say.
    """

    exit_code: int = 1

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def sentence(self) -> str:
        """The message and the fix as one line."""
        if self.fix:
            return f"{self.message.rstrip('.')}: {self.fix}"
        return self.message


class BadInput(LlmgwError):
    """The operator's input (script, inventory, arguments, model reference) is wrong."""

    exit_code = 2


class AdapterRefused(BadInput):
    """A LoRA adapter the operator named cannot be served with the model: its files cannot
    be read, or they do not fit it (a form shows it on the adapters field)."""


class DoesNotFit(LlmgwError):
    """The model fits nowhere in the fleet as described or discovered."""

    exit_code = 3


def shown_value(value: object) -> str:
    """A value from an outside file, as a sentence may quote it: short, and safe whatever it is.

    A list or a map is named by its kind (one nested thousands deep cannot even
    be printed); a 400-digit number is "a huge number"; text is cut at 60 characters.
    """
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int) and abs(value) >= 10**30:
        return "a huge number"
    if isinstance(value, int | float | str):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return type(value).__name__
