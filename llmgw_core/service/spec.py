"""A service: what should run, declared once, and the actions that make the fleet match it (pure).

```yaml
service:
  name: chat
  model: catalog:meta-llama/Llama-3.1-8B-Instruct   # anything `serve` takes
  context: 16384
  replicas: 2
  gateway: front            # optional: every replica behind it (a name, or a gateway's settings)
  drain_s: 30               # how long a replaced replica may finish its requests
  # and every other `serve` argument: gpu_class, gpus, nodes, engine, env, api_key_env, fallbacks …
```

Every shard of a service's replica carries a label (`ServiceLabel`): the
service's name, the settings that need a restart and their hash. `actions`
compares what runs with the document from those labels alone, so any
console, any time, reaches the same verdict; applying the same document
twice does nothing the second time.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag, field_validator

from llmgw_core.arguments import NAME_PATTERN
from llmgw_core.gateway.spec import GatewayArgs
from llmgw_core.serve.args import ADDED_RESTART_FIELDS, RESTART_FIELDS, ServeFields
from llmgw_core.serve.bounds import MAX_REPLICAS, ReplicaBounds

_REPLICA_INDEX = re.compile(r"^(?P<service>.+)-(?P<index>[0-9]+)$")

DEFAULT_DRAIN_S = 30.0


class ServiceDoc(ServeFields):
    """A service document's `service:` mapping."""

    name: str = Field(pattern=NAME_PATTERN)
    replicas: Annotated[
        Annotated[int, Tag("Count")] | Annotated[ReplicaBounds, Tag("Bounds")],
        Discriminator(lambda v: "Bounds" if isinstance(v, dict | ReplicaBounds) else "Count"),
    ] = 1
    gateway: str | GatewayArgs | None = None
    drain_s: float = Field(default=DEFAULT_DRAIN_S, ge=0, le=3600)

    @field_validator("replicas")
    @classmethod
    def _replica_count(cls, value: int | ReplicaBounds) -> int | ReplicaBounds:
        if isinstance(value, int) and not 0 <= value <= MAX_REPLICAS:
            raise ValueError(f"must be from 0 to {MAX_REPLICAS}, or {{min, max, …}}")
        return value

    @property
    def bounds(self) -> ReplicaBounds | None:
        """The scaling bounds, when `replicas` gives them (None: a fixed count)."""
        return self.replicas if isinstance(self.replicas, ReplicaBounds) else None

    def wanted(self, live: int) -> int:
        """How many replicas the document asks for when `live` run: its count, or `live`
        held within its bounds (`keep` moves it; `apply` only brings it within them)."""
        if isinstance(self.replicas, ReplicaBounds):
            return max(self.replicas.min, min(self.replicas.max, live))
        return self.replicas

    @field_validator("gateway", mode="before")
    @classmethod
    def _gateway_by_name(cls, value: Any) -> Any:
        if isinstance(value, str):
            return GatewayArgs(name=value)  # its name checked as a gateway's is
        return value

    @property
    def gateway_args(self) -> GatewayArgs | None:
        """The gateway every replica goes behind (started when it does not run)."""
        return self.gateway if isinstance(self.gateway, GatewayArgs) else None

    def settings(self) -> dict[str, Any]:
        """The settings a change of which needs the engines started again.

        A setting newer than the first services (`ADDED_RESTART_FIELDS`) is left out while it
        is unset, so the hash of a service that does not use it stays what it was: upgrading
        llmgw rolls no replica.
        """
        found = {}
        for name in RESTART_FIELDS:
            value = getattr(self, name)
            if name in ADDED_RESTART_FIELDS and not value:
                continue
            if isinstance(value, BaseModel):
                # A setting given as a mapping (`disaggregation`) is recorded as one: the
                # label is JSON on the nodes, and its hash must not depend on a repr.
                value = value.model_dump(mode="json", exclude_defaults=True)
            found[name] = value
        return found


def settings_hash(settings: Mapping[str, Any]) -> str:
    """A short, stable hash of the settings (their JSON with sorted keys)."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def service_label(doc: ServiceDoc) -> dict[str, Any]:
    """What every shard of the service's replicas records: `{name, hash, settings, document}`.

    The environment's values are kept (they are allowlisted engine variables,
    never secrets: `serve` refuses a secret there), so a change can be named;
    the whole document too (keys are named by their variables only), so `keep`
    given the service's name alone finds its bounds and targets.
    """
    settings = doc.settings()
    return {
        "name": doc.name,
        "hash": settings_hash(settings),
        "settings": settings,
        "document": doc.model_dump(mode="json", exclude_defaults=True),
    }


SIDES = ("prefill", "decode")
_ADVICE_ONLY = ("workload", "auto")
"""Parts of `disaggregation` that size a split and restart nothing by themselves."""


def side_label(label: Mapping[str, Any], role: str) -> dict[str, Any]:
    """The service's label as a worker of side `role` records it: its settings hold its own
    side (less its count and `keep`'s bounds) and not the other's, so a change to one side
    rolls that side only, and a side scaled up or down rolls nothing."""
    settings = dict(label["settings"])
    split = settings.get("disaggregation")
    if isinstance(split, Mapping):
        own = {k: v for k, v in (split.get(role) or {}).items() if k not in ("replicas", "scale")}
        kept = {k: v for k, v in split.items() if k not in (*SIDES, *_ADVICE_ONLY)}
        settings["disaggregation"] = {**kept, "side": role, role: own}
    return {**label, "settings": settings, "hash": settings_hash(settings)}


def _shown(value: Any) -> str:
    if value is None:
        return "(any)"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{k}={v}" for k, v in sorted(value.items())) + "}" if value else "{}"
        )
    return str(value)


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Each setting that differs, as `context 8192 → 16384`, in `RESTART_FIELDS` order."""
    return [
        f"{name} {_shown(before.get(name))} → {_shown(after.get(name))}"
        for name in RESTART_FIELDS
        if before.get(name) != after.get(name)
    ]


@dataclass(frozen=True)
class Running:
    """One replica of a service as the nodes report it.

    Attributes:
        name: the replica's name.
        hash: the settings hash its shards recorded.
        settings: the settings it was started with.
        phase: its phase (`serve.view`), `failed` and `stopped` are over.
        reason: why it failed, when it did.
        created_at: when it was started (the newest are stopped first).
    """

    name: str
    hash: str
    settings: Mapping[str, Any]
    phase: str
    reason: str | None = None
    created_at: float = 0.0
    adapters: tuple[tuple[str, str], ...] = ()
    """The LoRA adapters its engine holds now: (name, source as given)."""
    role: str | None = None
    """`prefill` or `decode` for a worker of a disaggregated service; None: it does both."""

    @property
    def over(self) -> bool:
        return self.phase in ("failed", "stopped")


def running_of(replicas: Sequence[Any], service: str) -> tuple[Running, ...]:
    """The replicas (`ReplicaView`s) of `service`, from the labels their shards carry."""
    found = []
    for view in replicas:
        label = view.spec.get("service")
        if not isinstance(label, Mapping) or label.get("name") != service:
            continue
        settings = label.get("settings")
        found.append(
            Running(
                name=view.name,
                hash=str(label.get("hash") or ""),
                settings=settings if isinstance(settings, Mapping) else {},
                phase=view.phase,
                reason=view.reason,
                created_at=view.created_at,
                adapters=tuple(
                    sorted((a["name"], a.get("origin") or a["source"]) for a in view.adapters)
                ),
                role=view.role,
            )
        )
    return tuple(sorted(found, key=lambda r: (r.created_at, r.name)))


ActionKind = Literal["start", "replace", "stop", "adapt"]


@dataclass(frozen=True)
class Action:
    """One change `apply` makes.

    Attributes:
        action: `start` a new replica, `replace` one (roll: start its successor,
            drain it, stop it), `stop` one, or `adapt` one: load and unload LoRA
            adapters in its running engine (a replace where the engine cannot).
        replica: the replica started, replaced or stopped.
        why: the reason, in words (`context 8192 → 16384`).
        by: for a replace, the name of the replica that takes its place.
        gateway: for the start of the service's gateway, its name (`replica` is then empty).
    """

    action: ActionKind
    replica: str
    why: str
    by: str | None = None
    gateway: str | None = None

    def as_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"action": self.action}
        if self.gateway is not None:
            found["gateway"] = self.gateway
        else:
            found["replica"] = self.replica
        found["why"] = self.why
        if self.by is not None:
            found["by"] = self.by
        return found

    @classmethod
    def of_dict(cls, found: Mapping[str, Any]) -> Action:
        """The action again from its `as_dict()` (a step's result, read back by the console)."""
        return cls(
            action=found["action"],
            replica=found.get("replica") or "",
            why=found.get("why") or "",
            by=found.get("by"),
            gateway=found.get("gateway"),
        )

    def line(self) -> str:
        """The action for people: `replace chat-1 by chat-3: context 8192 → 16384`."""
        if self.gateway is not None:
            return f"start gateway {self.gateway}: {self.why}"
        by = f" by {self.by}" if self.by else ""
        return f"{self.action} {self.replica}{by}: {self.why}"


def replica_names(service: str, taken: Sequence[str], count: int) -> list[str]:
    """`count` new replica names, `chat-3`, `chat-4` …, after the highest index `taken` holds."""
    highest = 0
    for name in taken:
        match = _REPLICA_INDEX.match(name)
        if match and match.group("service") == service:
            highest = max(highest, int(match.group("index")))
    return [f"{service}-{highest + offset}" for offset in range(1, count + 1)]


def _count(number: int, one: str) -> str:
    return f"{number} {one}{'' if number == 1 else 's'}"


def actions(
    doc_name: str,
    want: int,
    settings: Mapping[str, Any],
    digest: str,
    found: Sequence[Running],
    taken_names: Sequence[str],
    adapters: Sequence[tuple[str, str]] = (),
) -> tuple[Action, ...]:
    """What makes the service's replicas `want` replicas started with `settings`.

    In the order `apply` carries them out: the replicas that are over
    (failed, stopped) are forgotten; surplus ones stop, newest first; each
    replica whose settings differ is replaced by one with the document's
    (one at a time, so the service never has fewer ready replicas than
    before); missing ones start.

    Args:
        taken_names: every replica name on the fleet (a new name never repeats one).
        adapters: the LoRA adapters the document names, (name, source): a replica of
            the document's settings holding others is adapted in place.
    """
    done: list[Action] = []
    live = [r for r in found if not r.over]
    for replica in found:
        if replica.over:
            why = f"it {replica.phase}" + (f": {replica.reason}" if replica.reason else "")
            done.append(Action("stop", replica.name, why))
    current = [r for r in live if r.hash == digest]
    stale = [r for r in live if r.hash != digest]
    wants = f"the service wants {_count(want, 'replica')}"
    # Surplus of the document's settings: the newest go first.
    for replica in sorted(current, key=lambda r: (r.created_at, r.name))[want:][::-1]:
        done.append(Action("stop", replica.name, f"{wants}; {len(current)} run as it says"))
    missing = max(0, want - len(current))
    replaced, left = stale[:missing], stale[missing:]
    for replica in left[::-1]:
        what = ", ".join(changes(replica.settings, settings)) or "its settings differ"
        done.append(Action("stop", replica.name, f"{wants} and this one differs ({what})"))
    names = iter(replica_names(doc_name, taken_names, missing))
    for replica in replaced:
        what = ", ".join(changes(replica.settings, settings)) or "its settings differ"
        done.append(Action("replace", replica.name, what, by=next(names)))
    for name in names:
        done.append(Action("start", name, f"{wants}; {len(current) + len(replaced)} run"))
    stopping = {a.replica for a in done if a.action == "stop"}
    for replica in current:
        if replica.name not in stopping and replica.adapters != tuple(sorted(adapters)):
            done.append(Action("adapt", replica.name, adapter_changes(replica.adapters, adapters)))
    return tuple(done)


def adapter_changes(held: Sequence[tuple[str, str]], wanted: Sequence[tuple[str, str]]) -> str:
    """`adapters + legal, − chat` (a source changed: out and in again)."""
    have, want = dict(held), dict(wanted)
    added = [n for n in sorted(want) if have.get(n) != want[n]]
    removed = [n for n in sorted(have) if want.get(n) != have[n]]
    parts = []
    if added:
        parts.append("+ " + ", ".join(added))
    if removed:
        parts.append("− " + ", ".join(removed))
    return "adapters " + ", ".join(parts)


def gateway_action(doc: ServiceDoc, running_gateways: Sequence[str]) -> Action | None:
    """Start the service's gateway when it names one that does not run."""
    wanted = doc.gateway_args
    if wanted is None or wanted.name in running_gateways:
        return None
    return Action(
        "start",
        "",
        "the service puts its replicas behind it and it does not run",
        gateway=wanted.name,
    )


def doc_of_args(
    args: ServeFields, *, name: str, replicas: int = 1, gateway: str | None = None
) -> ServiceDoc:
    """The service that would run what `serve` with `args` starts (the wizard's), `replicas`
    times: the same fields, so applying it starts what serving would.

    Raises:
        pydantic.ValidationError: the arguments name something a document cannot hold.
    """
    fields = args.model_dump(include=set(ServeFields.model_fields), exclude_defaults=True)
    given: dict[str, Any] = {**fields, "name": name, "replicas": replicas}
    if gateway is not None:
        given["gateway"] = gateway
    return ServiceDoc.model_validate(given)


def document_text(doc: ServiceDoc) -> str:
    """The document as a file an operator keeps and applies again: `service:` and what differs
    from the defaults, its name first."""
    import yaml

    fields = doc.model_dump(mode="json", exclude_defaults=True)
    if isinstance(doc.gateway, GatewayArgs):
        gateway = doc.gateway.model_dump(mode="json", exclude_defaults=True)
        fields["gateway"] = gateway["name"] if set(gateway) == {"name"} else gateway
    ordered = {"name": fields.pop("name"), "model": fields.pop("model"), **fields}
    return yaml.safe_dump({"service": ordered}, sort_keys=False, allow_unicode=True)
