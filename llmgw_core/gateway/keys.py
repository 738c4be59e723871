"""The gateway's keys: which clients it lets in, and what it presents to the engines behind it.

Client keys come from the operator's machine: the variable `api_key_env`
names (its key id is the variable's name), and a `keys_file` of more keys,
each with an id and maybe the models it may use:

```yaml
keys:
  - {id: team-a, key: "sk-…", models: [meta-llama/Llama-3.1-8B-Instruct]}
  - {id: ops, key: "sk-…"}          # every model
  - id: interns
    key: "sk-…"
    limits: {requests_per_s: 2, concurrent: 4, tokens_per_min: 20000,
             budget_tokens: 1000000, budget_per: month}
  - {id: batch, key: "sk-…", weight: 0.5, priority: low}
```

A key's `limits` are kept by the front (`llmgw_agent.front.quota`): over one,
a request is answered 429 with `Retry-After`; a used-up budget waits for the
next UTC day or month, and its count outlives a restart of the gateway. A
key's `weight` (1 unless given) and `priority` (`high`, `normal`, `low`)
order the keys' requests when a gateway with `fair` holds them back
(`llmgw_agent.front.fair`).

The file is refused when other users of the operator's machine can read it.
The keys reach the gateway's front as its shard's `secret_env`, never a file
on the node; ids (never keys) are what the metrics and results show.

Towards the engines, the front presents each served model's own key: the
key of the variable its replicas were started with (`serve: {api_key_env}`).
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmgw_core.errors import BadInput
from llmgw_core.serve.keys import operator_key
from llmgw_core.yaml_text import load_checked, read_text_file

_KEY_TEXT = re.compile(r"^[\x21-\x7e]{16,512}$")


class KeyLimits(BaseModel):
    """What one client key may use (each absent: no limit); the front keeps them."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    requests_per_s: float | None = Field(None, gt=0, le=1_000_000, allow_inf_nan=False)
    concurrent: int | None = Field(None, ge=1, le=1_000_000)
    tokens_per_min: int | None = Field(None, ge=1, le=10**12)
    budget_tokens: int | None = Field(None, ge=1, le=10**15)
    budget_per: Literal["day", "month"] = "day"

    def as_front(self) -> dict[str, Any]:
        """The limits as the front's configuration carries them (unset ones left out)."""
        return self.model_dump(exclude_none=True)


class ClientKey(BaseModel):
    """One client key: its id (shown), the key (never shown), the models it may use (None: all),
    and its limits (None: none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    key: str = Field(repr=False)
    models: tuple[str, ...] | None = None
    limits: KeyLimits | None = None
    weight: float = Field(1.0, gt=0, le=1000, allow_inf_nan=False)
    """Its share under contention, against the other keys' (a gateway with `fair`)."""
    priority: Literal["high", "normal", "low"] = "normal"
    """Its class under contention: every waiting request of a higher class goes first."""


class KeysFile(BaseModel):
    """A `keys_file`: its keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: tuple[ClientKey, ...] = Field(min_length=1, max_length=10_000)


def read_keys_file(path: Path) -> tuple[ClientKey, ...]:
    """The keys of a `keys_file`, checked.

    Raises:
        BadInput: the file is missing, readable by other users, not YAML of
            keys, a key too short or holding spaces, or an id given twice.
    """
    source = f"keys file {path}"
    try:
        mode = path.stat().st_mode
        text = read_text_file(path, source)
    except OSError as exc:
        raise BadInput(f"{source} cannot be read: {exc.strerror or exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise BadInput(
            f"{source} can be read by other users of this machine ({stat.filemode(mode)})",
            f"chmod 600 {path}",
        )
    _node, raw = load_checked(text, source)
    try:
        keys = KeysFile.model_validate(raw).keys
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"])
        message = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise BadInput(f"{source}: {where} {message}".replace(" : ", ": ")) from None
    ids = [key.id for key in keys]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise BadInput(f"{source}: the id {twice[0]} is given twice")
    for key in keys:
        if not _KEY_TEXT.match(key.key):
            raise BadInput(
                f"{source}: the key of {key.id} must be 16 to 512 printable characters, no spaces"
            )
    return keys


def client_keys(
    api_key_env: str | None, keys_file: str | None, environ: Mapping[str, str] | None = None
) -> tuple[ClientKey, ...]:
    """Every key the gateway lets in: `api_key_env`'s (all models), then the file's.

    Raises:
        BadInput: the variable is unset, or the file is wrong (see `read_keys_file`).
    """
    keys: list[ClientKey] = []
    if api_key_env is not None:
        value = operator_key(api_key_env, "the gateway's key", environ)
        keys.append(ClientKey(id=api_key_env, key=value))
    if keys_file is not None:
        keys.extend(read_keys_file(Path(keys_file).expanduser()))
    ids = [key.id for key in keys]
    if len(set(ids)) != len(ids):
        raise BadInput(f"the keys file {keys_file} gives the id {api_key_env} again")
    return tuple(keys)


def upstream_key_envs(replicas: Sequence[Any]) -> dict[str, str]:
    """Served model → the variable its ready replicas' engines take their key from.

    Raises:
        BadInput: two replicas of one model were started with different variables
            (the router picks the replica, so the front could not know which key).
    """
    found: dict[str, str] = {}
    for replica in replicas:
        variable = replica.api_key_env
        if replica.phase != "ready" or variable is None:
            continue
        model = str(replica.spec.get("served_name") or replica.name)
        if found.setdefault(model, variable) != variable:
            raise BadInput(
                f"the replicas of {model} take their keys from {found[model]} and {variable}",
                "serve every replica of one model with one api_key_env",
            )
    return found


MAX_PEM_BYTES = 1024 * 1024


def read_tls(cert: str, key: str) -> dict[str, str]:
    """The certificate (with its chain) and key PEM text, read on the operator's machine.

    Raises:
        BadInput: a file missing, larger than a PEM file is, not PEM, or a key
            other users of this machine can read.
    """
    texts = {}
    for role, name in (("cert", cert), ("key", key)):
        path = Path(name).expanduser()
        source = f"the TLS {'certificate' if role == 'cert' else 'key'} {path}"
        try:
            mode = path.stat().st_mode
            if not stat.S_ISREG(mode) or path.stat().st_size > MAX_PEM_BYTES:
                raise BadInput(f"{source} is not a PEM file", "give the PEM file's path")
            text = path.read_text(encoding="ascii", errors="strict")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "it is not PEM text"
            raise BadInput(f"{source} cannot be read: {why or exc}") from None
        if role == "key" and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise BadInput(
                f"{source} can be read by other users of this machine ({stat.filemode(mode)})",
                f"chmod 600 {path}",
            )
        if "-----BEGIN " not in text:
            raise BadInput(f"{source} is not PEM text (no -----BEGIN line)")
        texts[role] = text
    return texts


def front_config(
    keys: Sequence[ClientKey],
    key_envs: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
    tls: Mapping[str, str] | None = None,
    store: str | None = None,
    fair: Mapping[str, Any] | None = None,
) -> str:
    """The front's configuration, as JSON for its `secret_env` (it holds keys: never shown).

    `store`: the name the keys' budgets and the access log are kept under on the
    front's node (the gateway's), so a gateway started again there goes on with them.
    `fair`: the gateway's fair shares (`FairShares`' fields), None for none.

    Raises:
        BadInput: a replica's key variable is not set here.
    """
    upstream = {
        model: operator_key(variable, f"the key of {model}'s engines", environ)
        for model, variable in key_envs.items()
    }
    config: dict[str, Any] = {
        "keys": [
            {
                "id": k.id,
                "key": k.key,
                "models": k.models,
                **({"limits": k.limits.as_front()} if k.limits is not None else {}),
                **({"weight": k.weight} if k.weight != 1.0 else {}),
                **({"priority": k.priority} if k.priority != "normal" else {}),
            }
            for k in keys
        ],
        "upstream": upstream,
    }
    if fair is not None:
        config["fair"] = dict(fair)
    if tls is not None:
        config["tls"] = dict(tls)
    if store is not None:
        config["store"] = store
    return json.dumps(config)
