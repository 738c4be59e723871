"""The secrets a serve carries, read from the operator's machine (its environment, its Hub login).

Nothing here is ever written down: a key is named by its variable
(`api_key_env: LLAMA_KEY`) in scripts, shard specs and results, and its value
is read from the operator's environment when it is needed — to start an
engine, to ask one, to heal a replica — and sent to the nodes only as a
shard's `secret_env`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from llmgw_core.errors import BadInput

NO_KEY = "none"
"""`api_key_env: none` on `ask`/`bench`: send no key (to prove a request without one is refused)."""

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
"""What an `api_key_env` value must look like (a variable's name, or `none` where allowed)."""

_CONTROL = re.compile(r"[\x00-\x20\x7f]")


def operator_key(variable: str, what: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of `variable` in the operator's environment: a key to give or present.

    Args:
        what: whose key it is, for the sentence (`the replica's key`).

    Raises:
        BadInput: the variable is unset or empty, or its value could not be sent
            in an HTTP header (a space, a newline, a control character).
    """
    value = (os.environ if environ is None else environ).get(variable)
    if not value:
        raise BadInput(
            f"the variable {variable} holding {what} is not set",
            f"export {variable}=… before running, or leave api_key_env out",
        )
    if _CONTROL.search(value):
        raise BadInput(f"the variable {variable} holding {what} has a space or a control character")
    return value


def client_key(
    asked: str | None, default: str | None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The key `ask`/`bench` present: `asked` (a variable, or `none`), else the target's own.

    Args:
        asked: the step's `api_key_env`; None takes `default`.
        default: the variable the replica or gateway was started with, if any.

    Raises:
        BadInput: the variable is not set.
    """
    variable = default if asked is None else asked
    if variable is None or variable == NO_KEY:
        return None
    return operator_key(variable, "the key to present", environ)


def hub_token_env() -> dict[str, str]:
    """`HF_TOKEN` from the operator's own Hugging Face login, for the nodes to download with.

    It travels as the shards' `secret_env` only: never argv, never a file on a node.
    """
    from huggingface_hub import get_token

    token = get_token()
    return {"HF_TOKEN": token} if token else {}
