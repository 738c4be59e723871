"""The Serve a model wizard walked end to end on the demo fleet: a replica reaches ready.

One console over the real demo fleet (agents over SSH, simulated engines):
`:serve`, a model from the catalog, the first way, its context, a name and
an environment variable, the confirmation page with each node's commands,
submit; the replicas screen shows it ready, its logs follow, and it stops.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from live_walk import ready_nodes, until
from lora_files import Widths, write_peft_adapter
from textual.widgets import DataTable, Log, Static

from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import LiveFeed
from llmgw_tui.screens.doctor import DoctorScreen
from llmgw_tui.screens.fabric import FabricScreen
from llmgw_tui.screens.logs import LogsScreen
from llmgw_tui.screens.replicas import ReplicasScreen
from llmgw_tui.screens.serve import ServeScreen

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"


def test_the_wizard_serves_a_model_that_reaches_ready_then_its_logs_follow_and_it_stops(
    tmp_path: Path,
):
    adapter = write_peft_adapter(
        tmp_path / "sql",
        Widths(hidden=4096, intermediate=14336, heads=32, kv_heads=8, layers=32),
        base_model="meta-llama/Llama-3.1-8B-Instruct",
    )
    other = write_peft_adapter(
        tmp_path / "qwen",
        Widths(hidden=3584, intermediate=18944, heads=28, kv_heads=4, layers=28),
        base_model="Qwen/Qwen2.5-7B-Instruct",
    )
    asyncio.run(_walk_the_wizard(adapter, other))


async def _walk_the_wizard(adapter: Path, other: Path) -> None:
    app = LlmgwApp(LiveFeed(inventory=None, demo=True, refresh_s=1.0), animation="none")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: ready_nodes(app) >= 20, "the demo fleet", 180)
        await pilot.press("colon", *"serve", "enter")
        await until(pilot, lambda: isinstance(app.screen, ServeScreen), "the wizard")
        wizard = app.screen
        assert isinstance(wizard, ServeScreen)
        assert wizard.blocked == "type a model"
        await pilot.press(*MODEL, "enter")
        await until(pilot, lambda: wizard.step == "way", "the ways of the plan")
        assert wizard.way is not None and wizard.way["free_now"]
        await pilot.press("enter")
        await until(pilot, lambda: wizard.step == "size" and wizard.blocked is None, "a fit")
        context = wizard.query_one("#serve-context")
        context.value = "8192"
        await pilot.pause()
        await until(pilot, lambda: wizard.blocked is None, "8192 tokens checked")
        fit = str(wizard.query_one("#serve-fit", Static).content)
        assert wizard.way["label"] in fit
        await pilot.press("ctrl+n")
        await until(pilot, lambda: wizard.step == "extras", "the extras page")
        wizard.query_one("#serve-env").value = "CUDA_VISIBLE_DEVICES=0"
        await until(pilot, lambda: wizard.blocked is not None, "the refused variable")
        assert "CUDA_VISIBLE_DEVICES" in wizard.blocked
        wizard.query_one("#serve-env").value = "NCCL_DEBUG=INFO"
        wizard.query_one("#serve-adapters").value = "sql"
        await until(pilot, lambda: "is not NAME=PATH" in (wizard.blocked or ""), "a bad adapter")
        # Only the adapters change: the page reads them again, and Next is free.
        adapters = wizard.query_one("#serve-adapters")
        adapters.value = f"qwen={other}"
        await until(pilot, lambda: wizard.blocked is None, "the adapters read as NAME=PATH")
        # Their files are read with the preview: another model's adapter comes back to its
        # field on page 4, in red, with the reason.
        await pilot.press("ctrl+n")
        await until(
            pilot,
            lambda: wizard.step == "extras" and "'qwen'" in (wizard.blocked or ""),
            "the other model's adapter refused on its field",
        )
        assert adapters.has_class("-invalid")
        assert "'qwen'" in str(adapters.border_subtitle)
        adapters.value = f"sql={adapter}"
        wizard.query_one("#serve-name").value = "wiz-8b"
        await until(pilot, lambda: wizard.blocked is None, "valid extras")
        await pilot.press("ctrl+n")
        await until(pilot, lambda: wizard.step == "confirm" and wizard.blocked is None, "preview")
        confirm = str(wizard.query_one("#serve-preview", Static).content)
        if os.environ.get("LLMGW_SAVE_SCREENS"):
            app.save_screenshot("wizard-confirm.svg", os.environ["LLMGW_SAVE_SCREENS"])
        assert "Replica wiz-8b" in confirm and "NCCL_DEBUG=INFO" in confirm and "$ " in confirm
        assert "adapters: sql" in confirm and "--enable-lora" in confirm
        await pilot.press("ctrl+n")
        await until(pilot, lambda: isinstance(app.screen, ReplicasScreen), "the replicas page")
        replicas = app.screen
        assert isinstance(replicas, ReplicasScreen)

        def ready() -> bool:
            return any(v.name == "wiz-8b" and v.phase == "ready" for v in replicas.views)

        await until(pilot, ready, "wiz-8b ready", 240)
        assert replicas.selected() == "wiz-8b"
        shown = replicas.query_one("#replica-reason", Static)
        await until(pilot, lambda: "adapters sql (on meta-llama" in str(shown.content), "adapters")

        answer = replicas.query_one("#replica-answer", Static)
        await pilot.press("a", *"Say hello.", "enter")
        await until(pilot, lambda: str(answer.content).startswith("wiz-8b: "), "an answer", 60)
        await pilot.press("escape", "b")
        await until(pilot, lambda: "tokens/s over 16 requests" in str(answer.content), "bench", 120)
        # The engine's own histograms, read every poll: the bench's minute shows in the row.
        table = replicas.query_one("#replicas", DataTable)

        def measured() -> bool:
            load = replicas.loads.get("wiz-8b")
            minute = load.latency if load is not None else None
            return minute is not None and (minute.requests or 0) >= 16

        await until(pilot, measured, "the bench's requests in the replica's minute", 30)
        assert str(table.get_cell("wiz-8b", "ttft")).endswith(" ms")
        assert str(table.get_cell("wiz-8b", "load")) != "-"
        minute = str(replicas.query_one("#replica-minute", Static).content)
        assert minute.startswith("last minute: ") and "time to first token p50" in minute

        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LogsScreen), "the logs")
        logs = app.screen
        assert isinstance(logs, LogsScreen)
        await until(pilot, lambda: logs.lines.seen > 0, "log lines")
        log = logs.query_one("#log", Log)
        assert log.line_count > 0 and "[r0 " in log.lines[0]
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is replicas, "back to the replicas")

        await pilot.press("s")
        await pilot.pause()
        await pilot.press("y")

        def gone() -> bool:
            return all(v.name != "wiz-8b" or v.phase == "stopped" for v in replicas.views)

        await until(pilot, gone, "wiz-8b stopped", 60)

        await pilot.press("colon", *"fabric h100-a-01 h100-a-02", "enter")
        await until(pilot, lambda: isinstance(app.screen, FabricScreen), "the fabric screen")
        fabric = app.screen
        assert isinstance(fabric, FabricScreen)
        await until(pilot, lambda: fabric.result is not None, "the fabric test", 120)
        rails = fabric.result["rails"]
        assert rails and all(row["node_a"] == "h100-a-01" for row in rails)
        await pilot.press("escape")
        await pilot.press("colon", *"doctor h100-a-01", "enter")
        await until(pilot, lambda: isinstance(app.screen, DoctorScreen), "the doctor")
        doctor = app.screen
        assert isinstance(doctor, DoctorScreen)
        await until(pilot, lambda: bool(doctor.rows), "the doctor's checks", 60)
        assert {row["node"] for row in doctor.rows} == {"h100-a-01"}
