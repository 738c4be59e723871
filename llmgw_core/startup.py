"""Start-up: loading modules without paying Python's garbage collector for them, and
pydantic's plugins off (`pydantic_plugins_off`).

Importing a path of this program (pydantic's models, asyncssh, the steps)
allocates a few hundred thousand objects, all of which live as long as the
process: modules, classes, functions, schemas. With the collector on, a
start spends a noticeable share of its time in collections that free
nothing worth having (docs/scale.md). So the heavy imports run with the
collector paused, and what they loaded is then frozen (never walked again, still
freed if it stops being referenced). The collector is on for everything
else a script does, which may run for hours.
"""

from __future__ import annotations

import gc
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager

PYDANTIC_PLUGIN_LOADER = "pydantic.plugin._loader"
PYDANTIC_PLUGINS_VARIABLE = "PYDANTIC_DISABLE_PLUGINS"
PYDANTIC_PLUGINS_OFF_VALUES = ("__all__", "1", "true")
"""The values of PYDANTIC_DISABLE_PLUGINS that turn every pydantic plugin off (the first is ours)."""


@contextmanager
def loading_modules() -> Iterator[None]:
    """Pause the collector for the block (imports, first schemas), then freeze what it left alive."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def pydantic_plugins_off() -> None:
    """Turn pydantic's plugins off unless the user set the variable, before any model is built.

    pydantic looks for plugins by reading the entry points of every installed
    distribution when the first model is built: time every start pays for
    plugins this program never uses. Set the variable empty to have them back.
    """
    os.environ.setdefault(PYDANTIC_PLUGINS_VARIABLE, PYDANTIC_PLUGINS_OFF_VALUES[0])
    skip_pydantic_plugin_lookup()


def skip_pydantic_plugin_lookup() -> bool:
    """With every pydantic plugin off, do not import pydantic's plugin loader; whether skipped.

    At its first model pydantic imports its plugin loader, which imports
    `importlib.metadata` (and the `email` package with it), spent even when
    PYDANTIC_DISABLE_PLUGINS turns every plugin off, as the loader reads the
    variable only after that import. With the variable so set (the CLI sets
    it unless the user did), the loader's one function would answer "no
    plugins": a module answering that stands in for it. Any other value, or a
    loader already imported, leaves pydantic as it is.
    """
    if os.environ.get(PYDANTIC_PLUGINS_VARIABLE) not in PYDANTIC_PLUGINS_OFF_VALUES:
        return False
    if PYDANTIC_PLUGIN_LOADER in sys.modules:
        return False
    loader = types.ModuleType(PYDANTIC_PLUGIN_LOADER, "pydantic's plugin loader, every plugin off")
    loader.get_plugins = lambda: ()  # type: ignore[attr-defined]
    sys.modules[PYDANTIC_PLUGIN_LOADER] = loader
    return True
