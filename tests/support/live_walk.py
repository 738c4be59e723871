"""What the Pilot walks on: waiting for a condition, a screen a key opens, a replica ready on the
replicas page, the command palette's answer, ready nodes; part of the demo fleet and a console
on it through its inventory; a replica's key checked."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import LiveFeed


async def until(pilot, condition: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
    """Pause the pilot until `condition` holds, or fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:g} s for {what}")
        await pilot.pause(0.1)


ScreenT = TypeVar("ScreenT")


async def screen_after(pilot, app, key: str, kind: type[ScreenT], what: str) -> ScreenT:
    """Press `key` and wait until the app shows a screen of `kind`; that screen."""
    await pilot.press(key)
    await until(pilot, lambda: isinstance(app.screen, kind), what)
    screen = app.screen
    assert isinstance(screen, kind)
    return screen


async def replica_ready(pilot, replicas: Any, name: str, what: str, timeout_s: float) -> Any:
    """Wait until the replicas page lists `name` ready; its view."""

    def ready() -> bool:
        return any(v.name == name and v.phase == "ready" for v in replicas.views)

    await until(pilot, ready, what, timeout_s)
    return next(v for v in replicas.views if v.name == name)


def palette_answered(app, typed: str) -> bool:
    """The command palette is open on `typed`, its search has ended, and it found a command.

    Its hits arrive in batches a quarter of a second apart: `enter` before the search ends
    can run a command of the first batch, not the best one.
    """
    from textual.command import CommandList, CommandPalette
    from textual.widgets import Input

    palette = app.screen
    if not isinstance(palette, CommandPalette) or palette.query_one(Input).value != typed:
        return False
    group = CommandPalette._GATHER_COMMANDS_GROUP
    searching = any(w.group == group and not w.is_finished for w in app.workers)
    return not searching and palette.query_one(CommandList).option_count > 0


def ready_nodes(app: LlmgwApp) -> int:
    """How many of the console's nodes are ready (0 before the fleet is known)."""
    return sum(n.state == "ready" for n in app.fleet.nodes) if app.fleet else 0


@contextlib.asynccontextmanager
async def demo_part(root: Path, names: Iterable[str]) -> AsyncIterator[Any]:
    """The demo fleet's nodes named (loopback SSH, real agents), up for the block."""
    from llmgw_core.fleet.sim.demo import demo_nodes, start_demo_fleet

    wanted = set(names)
    demo = await start_demo_fleet(root, [node for node in demo_nodes() if node.name in wanted])
    try:
        yield demo
    finally:
        await demo.stop()


def console_on(demo: Any) -> tuple[LlmgwApp, LiveFeed]:
    """A console on `demo` reached through its inventory, as any fleet is (not `--demo`)."""
    feed = LiveFeed(inventory=str(demo.root / "inventory.yaml"), demo=False, refresh_s=1.0)
    return LlmgwApp(feed, animation="none"), feed


async def key_in_front(feed: LiveFeed, view: Any, key_env: str) -> None:
    """The replica was served with `key_env`'s key: it answers with it, and refuses (401)
    a request without it."""
    import pytest

    from llmgw_core.errors import LlmgwError
    from llmgw_core.serve.http import chat, engine_tls

    assert view.api_key_env == key_env
    assert await feed.ask(view, "Say hello.")
    node, port, served = view.ready_engine()
    with pytest.raises(LlmgwError, match="401"):
        await chat(
            feed._engines(),
            node,
            port,
            served,
            "Say hello.",
            api_key=None,
            host=view.http_host,
            tls=engine_tls(view.tls_cert),
        )
