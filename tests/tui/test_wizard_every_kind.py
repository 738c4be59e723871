"""The Serve a model wizard serves each kind of way it lists, in the console, to ready (issue 35).

One console on part of the demo fleet (its H100 pair and six NVL72 trays,
through their inventory, as any fleet is reached). For each kind — one card (the 8B),
tensor parallel inside a node (the 70B), pipeline parallel over the H100
pair and over NVL72 trays (the 405B) — the wizard is walked by keyboard:
the model, the way's row picked with the arrow keys, its context, a name,
Confirm, Serve. The wizard's arguments are the `serve` step's, with the
fields the headless runner is given for that way in
tests/e2e/test_wizard_every_way.py; the replicas screen shows the replica
ready with a shard on each of its nodes, then it is stopped. The 8B is
served with a key named: the engine refuses a request without it; the multi-node
ways with `NCCL_IB_HCA=mlx5_0,mlx5_1` in the environment field.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from live_walk import (
    console_on,
    demo_part,
    key_in_front,
    ready_nodes,
    replica_ready,
    screen_after,
    until,
)
from textual.widgets import DataTable

from llmgw_core.script.steps.serve import ServeArgs
from llmgw_core.serve.choice import way_layout
from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import LiveFeed
from llmgw_tui.screens.replicas import ReplicasScreen
from llmgw_tui.screens.serve import ServeScreen

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

KEY_ENV = "LLMGW_WIZARD_KEY"
NODES = ("h100-a-01", "h100-a-02", *(f"gb200-r1-t{tray:02d}" for tray in range(1, 7)))
"""The demo's H100 pair and six of its NVL72 trays: every kind's way, on a third of the fleet."""
Pick = Callable[[dict[str, Any]], bool]
KINDS: list[tuple[str, str, Pick]] = [
    ("catalog:meta-llama/Llama-3.1-8B-Instruct", "one card", lambda w: w["cards"] == 1),
    (
        "catalog:meta-llama/Llama-3.3-70B-Instruct",
        "tensor parallel in a node",
        lambda w: w["nodes"] == 1 and w["cards"] > 1,
    ),
    (
        "catalog:meta-llama/Meta-Llama-3.1-405B",
        "the H100 pair",
        lambda w: w["nodes"] == 2 and w["gpu_class"] == "h100-80g",
    ),
    (
        "catalog:meta-llama/Meta-Llama-3.1-405B",
        "NVL72 trays",
        lambda w: w["nodes"] > 1 and w["gpu_class"] == "gb200-186g",
    ),
]


def test_the_wizard_serves_one_card_a_node_the_h100_pair_and_nvl72_trays_to_ready(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.setenv(KEY_ENV, "sk-wizard-test-key")
    asyncio.run(_every_kind(tmp_path / "demo"))


async def _every_kind(root: Path) -> None:
    async with demo_part(root, NODES) as demo:
        app, _feed = console_on(demo)
        async with app.run_test(size=(140, 44)) as pilot:
            await until(pilot, lambda: ready_nodes(app) == len(NODES), "the fleet", 120)
            for index, (model, kind, pick) in enumerate(KINDS):
                await _serve_through_the_wizard(app, pilot, model, kind, pick, f"kind-{index}")


async def _serve_through_the_wizard(
    app: LlmgwApp, pilot: Any, model: str, kind: str, pick: Pick, name: str
) -> None:
    wizard = await screen_after(pilot, app, "5", ServeScreen, "the wizard")
    await until(pilot, lambda: wizard.step == "model", "the model page")
    await pilot.press(*model, "enter")
    await until(pilot, lambda: wizard.step == "way", f"the ways of {model}")
    plan = wizard.plan_body
    assert plan is not None
    row = next(i for i, way in enumerate(plan["options"]) if pick(way))
    way = plan["options"][row]
    await pilot.press(*["down"] * row)
    table = wizard.query_one("#serve-ways", DataTable)
    await until(pilot, lambda: table.cursor_row == row and wizard.way == way, f"{kind}'s row")
    await pilot.press("enter")
    await until(pilot, lambda: wizard.step == "size" and wizard.blocked is None, "its fit")
    await pilot.press("ctrl+n")
    await until(pilot, lambda: wizard.step == "extras", "the extras page")
    assert wizard.query_one("#serve-name").value == plan["replica_name"]
    wizard.query_one("#serve-name").value = name
    keyed = kind == "one card"
    # A value with commas is one entry, as the headless `env:` takes it (the core's rule).
    env = {"NCCL_IB_HCA": "mlx5_0,mlx5_1"} if way["nodes"] > 1 else {}
    wizard.query_one("#serve-env").value = " ".join(f"{k}={v}" for k, v in env.items())
    if keyed:
        wizard.query_one("#serve-key").value = "NOT SET"
        await until(pilot, lambda: (wizard.blocked or "").startswith("key: "), "a bad key name")
        wizard.query_one("#serve-key").value = KEY_ENV
    await until(pilot, lambda: wizard.blocked is None, "valid extras")
    await pilot.press("ctrl+n")
    await until(pilot, lambda: wizard.step == "confirm" and wizard.blocked is None, "the preview")

    # What the wizard serves is what the headless runner is given for this way.
    assert wizard.serve_args() == ServeArgs(
        model=model,
        context=plan["context"],
        name=name,
        api_key_env=KEY_ENV if keyed else None,
        env=env,
        **way_layout(way),
    )
    replicas = await screen_after(pilot, app, "ctrl+n", ReplicasScreen, "the replicas page")
    view = await replica_ready(pilot, replicas, name, f"{name} ({kind}) ready", 180)
    nodes = sorted({shard.node for shard in view.shards})
    assert len(nodes) == way["nodes"], (kind, nodes)
    await until(pilot, lambda: replicas.selected() == name, f"{name} selected")
    shards = replicas.query_one("#shards", DataTable)

    def shown_nodes() -> list[str]:
        return sorted({str(shards.get_row_at(i)[1]) for i in range(shards.row_count)})

    await until(pilot, lambda: shown_nodes() == nodes, f"{name}'s shards on {nodes}")
    if keyed:
        feed = app.feed
        assert isinstance(feed, LiveFeed)
        await key_in_front(feed, view, KEY_ENV)

    await pilot.press("s")
    await until(pilot, lambda: len(app.screen_stack) > 1, "the stop question")
    await pilot.press("y")

    def stopped() -> bool:
        return all(v.name != name or v.phase == "stopped" for v in replicas.views)

    await until(pilot, stopped, f"{name} stopped", 60)
