"""What is typed into the console never ends it: the two ways the wizard used to die, on the demo.

1. On the Confirm page the focus stayed in page 4's environment field,
   hidden: `nope` typed there and Enter raised `BadInput` out of the
   wizard and the console exited with a traceback.
2. After a serve, `5` reopened the wizard on its Confirm page with the last
   replica, the focus again in the hidden field: a new model's name typed
   there crashed the console at Enter.

Both walk the real demo fleet (agents over SSH, simulated engines), where
the Confirm page's preview takes long enough for the old focus bug to bite.
"""

from __future__ import annotations

import asyncio

import pytest
from live_walk import ready_nodes, until
from monkey import hidden
from textual.widgets import Input, Static

from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import LiveFeed
from llmgw_tui.screens.replicas import ReplicasScreen
from llmgw_tui.screens.serve import ServeScreen
from llmgw_tui.screens.serve_pages import GatewayBox

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"
NEXT_MODEL = "catalog:Qwen/Qwen2.5-7B-Instruct"


@pytest.fixture(autouse=True)
def _state_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


async def _to_confirm(app: LlmgwApp, pilot) -> ServeScreen:
    """`5`, the model, then ctrl+n on every page (each once it may be pressed)."""
    await until(pilot, lambda: ready_nodes(app) >= 20, "the demo fleet", 180)
    await pilot.press("5")
    await until(pilot, lambda: isinstance(app.screen, ServeScreen), "the wizard")
    wizard = app.screen
    assert isinstance(wizard, ServeScreen)
    await pilot.press(*MODEL)
    for page in ("way", "size", "extras", "confirm"):
        await until(pilot, lambda: wizard.blocked is None, f"Next on the page before {page}")
        await pilot.press("ctrl+n")
        await until(pilot, lambda page=page: wizard.step == page, f"the {page} page")
    return wizard


def test_nope_typed_on_the_confirm_page_never_reaches_a_hidden_field():
    async def run() -> None:
        app = LlmgwApp(LiveFeed(inventory=None, demo=True, refresh_s=1.0), animation="none")
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            wizard = await _to_confirm(app, pilot)
            assert isinstance(app.focused, GatewayBox) and not hidden(app.focused)
            await pilot.press(*"nope")
            assert wizard.query_one("#serve-env", Input).value == ""
            await until(pilot, lambda: wizard.blocked is None, "the preview")
            await pilot.press("enter")  # Enter on Confirm serves
            await until(pilot, lambda: isinstance(app.screen, ReplicasScreen), "the replicas")
            assert app.is_running and app.return_code is None
            assert app.guard.caught == []

    asyncio.run(run())


def test_a_stray_q_on_the_confirm_page_keeps_the_wizard_and_a_second_one_quits():
    async def run() -> None:
        app = LlmgwApp(LiveFeed(inventory=None, demo=True, refresh_s=1.0), animation="none")
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            wizard = await _to_confirm(app, pilot)
            said: list[str] = []
            wizard.notify = lambda message, **_: said.append(message)  # type: ignore[method-assign]
            await pilot.press("q")
            await pilot.pause()
            assert app.is_running and app.screen is wizard and wizard.step == "confirm"
            assert said and said[0].startswith("q again quits")
            await pilot.press("q")
            await until(pilot, lambda: not app.is_running, "the console to quit")

    asyncio.run(run())


def test_five_after_a_serve_opens_a_fresh_wizard_on_page_one():
    async def run() -> None:
        app = LlmgwApp(LiveFeed(inventory=None, demo=True, refresh_s=1.0), animation="none")
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            wizard = await _to_confirm(app, pilot)
            await until(pilot, lambda: wizard.blocked is None, "the preview")
            await pilot.press("ctrl+n")
            await until(pilot, lambda: isinstance(app.screen, ReplicasScreen), "the replicas")
            replicas = app.screen
            assert isinstance(replicas, ReplicasScreen)

            def ready() -> bool:
                return any(v.phase == "ready" for v in replicas.views)

            await until(pilot, ready, "the replica ready", 240)
            await pilot.press("5")
            await until(pilot, lambda: app.screen is wizard, "the wizard again")
            await pilot.pause()
            assert wizard.step == "model" and wizard.blocked == "type a model"
            model = wizard.query_one("#serve-model", Input)
            assert app.focused is model and model.value == ""
            for field in ("#serve-env", "#serve-name", "#serve-context"):
                assert wizard.query_one(field, Input).value == ""
            last = wizard.query_one("#serve-last", Static)
            assert last.display and MODEL in str(last.content)
            await pilot.press(*NEXT_MODEL, "enter")
            await until(pilot, lambda: wizard.step == "way", "the next model's ways")
            assert wizard.plan_body is not None and wizard.plan_body["model"]
            assert app.is_running and app.guard.caught == []

    asyncio.run(run())
