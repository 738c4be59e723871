"""The wizard's last page puts a replica behind a gateway; the replicas screen lists it.

One console over the real demo fleet (agents over SSH, a sim engine, the
gateway's front on cpu-01): serve with "put behind a gateway" ticked, see the
gateway's line on the replicas screen, then stop the replica and the gateway.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from live_walk import ready_nodes, until
from textual.widgets import Checkbox, Static

from llmgw_core.gateway.run import gateways_now, stop_gateway
from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import LiveFeed
from llmgw_tui.screens.replicas import ReplicasScreen
from llmgw_tui.screens.serve import ServeScreen
from llmgw_tui.screens.serve_pages import GATEWAY_NAME

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(420),
]

MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"


def test_the_wizard_puts_the_replica_behind_a_gateway_listed_on_the_replicas_screen():
    asyncio.run(_walk())


async def _walk() -> None:
    feed = LiveFeed(inventory=None, demo=True, refresh_s=1.0)
    app = LlmgwApp(feed, animation="none")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: ready_nodes(app) >= 20, "the demo fleet", 180)
        wizard = await _to_confirm(pilot, app, "gw-8b")
        box = wizard.query_one("#serve-gateway", Checkbox)
        assert "put behind a gateway" in str(box.label) and box.value is False
        await pilot.click("#serve-gateway")
        assert box.value is True
        await pilot.press("ctrl+n")
        await until(pilot, lambda: isinstance(app.screen, ReplicasScreen), "the replicas page")
        replicas = app.screen
        assert isinstance(replicas, ReplicasScreen)

        def fronted() -> bool:
            return any(
                g["name"] == GATEWAY_NAME and len(g.get("workers") or {}) == 1
                for g in replicas.gateways
            )

        await until(pilot, fronted, "the gateway with gw-8b behind it", 240)
        line = str(replicas.query_one("#gateways", Static).content)
        # 30000, or the next free port when another demo of a parallel suite holds it.
        assert re.match(
            rf"gateway {GATEWAY_NAME} at cpu-01:3\d{{4}} \(round_robin, running\)", line
        )
        assert "meta-llama/Llama-3.1-8B-Instruct ×1" in line

        stopped = await stop_gateway(feed._live(), GATEWAY_NAME)
        assert stopped["stopped"] is True
        assert [g for g in await gateways_now(feed._live()) if g.live] == []
        await until(pilot, lambda: not replicas.gateways, "the gateway line gone", 30)
        assert replicas.query_one("#gateways", Static).display is False
        await feed.stop_replica("gw-8b")


def test_the_wizard_saves_what_it_would_serve_as_a_service_and_applies_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kept.service.yaml").write_text("mine: true\n")
    asyncio.run(_save_as_service(tmp_path))


async def _to_confirm(pilot, app, name: str, flags: str = "") -> ServeScreen:
    await pilot.press("colon", *"serve", "enter")
    await until(pilot, lambda: isinstance(app.screen, ServeScreen), "the wizard")
    wizard = app.screen
    assert isinstance(wizard, ServeScreen)
    await pilot.press(*MODEL, "enter")
    await until(pilot, lambda: wizard.step == "way", "the ways of the plan")
    await pilot.press("enter")
    await until(pilot, lambda: wizard.step == "size" and wizard.blocked is None, "a fit")
    wizard.query_one("#serve-context").value = "8192"
    await pilot.pause()
    await until(pilot, lambda: wizard.blocked is None, "8192 tokens checked")
    await pilot.press("ctrl+n")
    await until(pilot, lambda: wizard.step == "extras", "the extras page")
    wizard.query_one("#serve-name").value = name
    if flags:
        hint = str(wizard.query_one("#serve-flags-hint", Static).content)
        assert hint.startswith("Engine flags for vllm: NAME=VALUE entries, e.g. ")
        wizard.query_one("#serve-flags").value = "port=9000"
        await until(pilot, lambda: wizard.blocked is not None, "the refusal", 10)
        assert "port is llmgw's to set" in wizard.blocked
        wizard.query_one("#serve-flags").value = flags
    await until(pilot, lambda: wizard.blocked is None, "valid extras")
    await pilot.press("ctrl+n")
    await until(pilot, lambda: wizard.step == "confirm" and wizard.blocked is None, "preview")
    return wizard


async def _save_as_service(folder) -> None:
    from llmgw_core.service.apply import stop_service

    feed = LiveFeed(inventory=None, demo=True, refresh_s=1.0)
    app = LlmgwApp(feed, animation="none")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: ready_nodes(app) >= 20, "the demo fleet", 180)
        flags = "enable_auto_tool_choice=true tool_call_parser=hermes"
        wizard = await _to_confirm(pilot, app, "kept", flags)
        preview = str(wizard.query_one("#serve-preview", Static).content)
        assert "--enable-auto-tool-choice --tool-call-parser hermes" in preview
        assert "ctrl+s saves it as service kept (kept.service.yaml here)" in preview
        await pilot.press("ctrl+s")  # a file of the operator's own is in the way: kept
        await pilot.pause()
        assert (folder / "kept.service.yaml").read_text() == "mine: true\n"
        assert wizard.step == "confirm"
        (folder / "kept.service.yaml").unlink()
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ReplicasScreen), "the replicas", 120)

        async def services() -> list[str]:
            return [f"{v.name}:{v.service}:{v.phase}" for v in await feed.replicas()]

        deadline = asyncio.get_running_loop().time() + 60
        while "kept-1:kept:ready" not in await services():
            assert asyncio.get_running_loop().time() < deadline, await services()
            await asyncio.sleep(0.5)
        saved = (folder / "kept.service.yaml").read_text()
        assert saved.startswith(f"service:\n  name: kept\n  model: {MODEL}\n  context: 8192\n")
        assert "  engine_args:\n    enable_auto_tool_choice: true\n" in saved
        # Saved and applied again from the wizard: nothing changes, the file is its own.
        await _to_confirm(pilot, app, "kept", flags)
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ReplicasScreen), "applied again", 120)
        assert [s for s in await services() if ":kept:" in s] == ["kept-1:kept:ready"]
        # `k` keeps the selected replica's service, visibly, until `k` again.
        replicas = app.screen
        assert isinstance(replicas, ReplicasScreen)
        await until(pilot, lambda: replicas.selected() == "kept-1", "kept-1 selected", 30)
        await pilot.press("k")
        await until(pilot, lambda: replicas.keeping == "kept", "the keeper on", 10)
        line = replicas.query_one("#keeping", Static)
        assert line.display and str(line.content).startswith("keeping service kept (k stops)")
        await pilot.pause(3.0)  # a cycle or more: nothing to change, the keeper stays on
        assert replicas.keeping == "kept", "the keeper stopped by itself"
        await pilot.press("k")
        await until(pilot, lambda: replicas.keeping is None, "the keeper off", 30)
        assert line.display is False
        live = [s for s in await services() if ":kept:" in s and not s.endswith(":stopped")]
        stopped = await stop_service(feed._live(), feed._engines(), "kept")
        assert sorted(stopped["stopped"]) == sorted(s.split(":")[0] for s in live)
