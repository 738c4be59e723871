"""Paths into a JSON document, for fuzz tests that put a hostile value anywhere in a real one."""

from __future__ import annotations

from typing import Any


def json_paths(
    value: Any, prefix: tuple[Any, ...] = (), *, items: int = 8
) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON document, maps and lists alike (a list's first `items`)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += json_paths(inner, (*prefix, key), items=items)
    elif isinstance(value, list):
        for index, inner in enumerate(value[:items]):
            found += json_paths(inner, (*prefix, index), items=items)
    return found


def put(document: Any, path: tuple[Any, ...], value: Any) -> None:
    """Replace the value at `path` inside `document`."""
    for step in path[:-1]:
        document = document[step]
    document[path[-1]] = value
