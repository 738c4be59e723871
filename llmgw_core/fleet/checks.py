"""What the inventory says against what a node turns out to have (pure).

Fabrics are named by the operator, never guessed; but an operator can name
an adapter a node does not have (a typo, a card moved to another slot). That
contradiction is caught after discovery, on the node it concerns, instead of
surfacing later as a multi-node replica that falls back to sockets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from llmgw_core.inventory import NodeSpec


def adapter_names(facts: Any) -> set[str]:
    """The names of the adapters a node reported (`mlx5_0`, …)."""
    adapters = _get(facts, "adapters") or []
    names = set()
    for adapter in adapters:
        name = _get(adapter, "name")
        if name:
            names.add(str(name))
    return names


def fabric_problem(spec: NodeSpec, facts: Any) -> str | None:
    """One sentence when a fabric of `spec` names adapters the node lacks, else None."""
    present = adapter_names(facts)
    for fabric in spec.fabrics:
        missing = [hca for hca in fabric.hcas if hca not in present]
        if missing:
            has = ", ".join(sorted(present)) if present else "none"
            return (
                f"fabric {fabric.name} names {_listing(missing)}, which {spec.name} does not have "
                f"(its adapters: {has}); correct the fabric's hcas in the inventory"
            )
    return None


def _listing(names: Iterable[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _get(value: Any, key: str) -> Any:
    """A field of a facts object, whether a validated model or a plain dict."""
    if isinstance(value, Mapping):
        return value.get(key)
    return getattr(value, key, None)
