"""Which variables an operator may add to an engine's environment, and which are secret (pure).

`--env KEY=VALUE` (and a script's `env:`) tunes engines on every node of a
replica: `NCCL_DEBUG=INFO` while a fabric is brought up, `NCCL_IB_*` to steer
it, `VLLM_*`, `TORCH_*`. Only engine tuning variables are taken: a `PATH` or
`LD_PRELOAD` from a script would change what runs, not how. The cards are
placement's (`CUDA_VISIBLE_DEVICES` is never the operator's), and a secret
never travels on a command line: the Hub token comes from the operator's
token store, through the launcher, into the environment alone.

This module is the one place that says what is allowed and what is secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from llmgw_agent.secret_names import is_secret_name
from llmgw_core.errors import BadInput

ALLOWED_PREFIXES = (
    "NCCL_",
    "VLLM_",
    "SGLANG_",
    "UCX_",
    "GLOO_",
    "TORCH_",
    "PYTORCH_",
    "CUDA_",
    "NVSHMEM_",
    "HF_",
    "RAY_",
    "LLAMA_",
    "GGML_",
    "TRANSFORMERS_",
)
"""Families of variables engines are tuned with."""

ALLOWED_NAMES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
    "NO_COLOR",
)
"""Single variables engines are tuned with."""

PLACEMENT_KEYS = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
"""Set by the launcher from the cards placement claimed; never the operator's."""

MAX_VALUE_CHARS = 1024
"""The longest value taken: tuning values are short; a long one is a mistake or an attack."""

_KEY = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

ALLOWED_TEXT = ", ".join([*(prefix + "*" for prefix in ALLOWED_PREFIXES), *ALLOWED_NAMES])


def is_secret_key(key: str) -> bool:
    """True for a variable that holds a secret (`HF_TOKEN`, `VLLM_API_KEY`): the agent's rule
    (`llmgw_agent.secret_names`), which refuses one in a shard's stored env by the same test."""
    return is_secret_name(key)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment as it may be shown: every secret's value hidden."""
    return {key: ("***" if is_secret_key(key) else value) for key, value in env.items()}


def key_refusal(key: str) -> str | None:
    """Why `--env` cannot set `key`, or None when it may."""
    if not _KEY.match(key):
        return "not a variable name (capital letters, digits and _)"
    if key in PLACEMENT_KEYS:
        return "the cards are the ones placement claimed"
    if is_secret_key(key):
        return "a secret never goes on a command line; the Hub token comes from the token store"
    if key in ALLOWED_NAMES or key.startswith(ALLOWED_PREFIXES):
        return None
    return "not an engine tuning variable"


def value_refusal(value: str) -> str | None:
    """Why a value cannot be passed, or None when it can."""
    if len(value) > MAX_VALUE_CHARS:
        return f"its value is {len(value)} characters long, over the {MAX_VALUE_CHARS} taken"
    if _CONTROL.search(value):
        return "its value holds a newline or another control character"
    return None


def _as_text(value: object) -> str | None:
    """A script's value as text: numbers are written out (`OMP_NUM_THREADS: 8`), nothing else is."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def checked_env(env: Mapping[str, object]) -> dict[str, str]:
    """The operator's variables, every one allowed, or one sentence naming each refused.

    Values are text; a number from a YAML script is taken as its text.

    Raises:
        BadInput: naming every refused variable and why.
    """
    refused: list[str] = []
    checked: dict[str, str] = {}
    for key, raw in env.items():
        value = _as_text(raw)
        if not isinstance(key, str) or value is None:
            shown = repr(key) if not isinstance(key, str) or _CONTROL.search(key) else key
            refused.append(f"{shown} (its value is {type(raw).__name__}, not text: quote it)")
            continue
        why = key_refusal(key) or value_refusal(value)
        if why:
            shown = repr(key) if _CONTROL.search(key) else key  # one line, whatever the key holds
            refused.append(f"{shown} ({why})")
        checked[key] = value
    if refused:
        many = "s" if len(refused) > 1 else ""
        raise BadInput(
            f"--env refuses the variable{many} {'; '.join(refused)}",
            f"pass only engine tuning variables: {ALLOWED_TEXT}",
        )
    return checked


def parse_env_options(options: Iterable[str], *, flag: str = "--env ") -> dict[str, str]:
    """`["NCCL_DEBUG=INFO", …]` (as `--env` gives them) checked into a mapping.

    A key given twice keeps its last value, as a shell would. `flag` is how the
    operator wrote each entry, for the refusal ("" where a field holds them).

    Raises:
        BadInput: an option without `=`, or a refused variable.
    """
    env: dict[str, str] = {}
    for option in options:
        key, equals, value = option.partition("=")
        if not equals or not key:
            raise BadInput(
                f"{flag}{option[:60]!r} is not KEY=VALUE", f"write it as {flag}NCCL_DEBUG=INFO"
            )
        env[key] = value
    return checked_env(env)


def parse_env_text(text: str) -> dict[str, str]:
    """`NCCL_DEBUG=INFO NCCL_IB_HCA=mlx5_0,mlx5_1` (a field of entries apart by spaces; a
    value may hold commas) checked into a mapping, by `parse_env_options`'s rule.

    Raises:
        BadInput: an entry without `=`, or a refused variable.
    """
    return parse_env_options(text.split(), flag="")
