"""The wizard serves a Hub model: the nodes fetch its weights, and a key named is put in front.

A console on a fleet reached through its inventory (a demo fleet of one H100
node on loopback SSH; not `--demo`, so a Hub model is fetched as on real
nodes) and a stand-in Hub on 127.0.0.1 holding a repository with a real
`config.json` (Qwen3-8B's, from the shared fixtures) and a weights file. The
console plans from the Hub (`HF_ENDPOINT`), the node downloads from it (its
own `HF_ENDPOINT`, as a node behind a mirror has it), and the wizard, walked
by keyboard with a key variable named, brings the replica up: the weights are
in the node's model folder, byte for byte as the Hub served them, and the
engine answers with the key and refuses without it. A LoRA adapter named from
the Hub on page 4 is read there by range requests and fetched by the node the
same way, and its engine loads it from the node's model folder.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hub_server import FakeRepo, LocalHub, point_hub_at
from live_walk import (
    console_on,
    demo_part,
    key_in_front,
    ready_nodes,
    replica_ready,
    screen_after,
    until,
)
from lora_files import Widths, write_peft_adapter

from llmgw_tui.screens.replicas import ReplicasScreen
from llmgw_tui.screens.serve import ServeScreen

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FIXTURE = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "models" / "Qwen--Qwen3-8B"
REPO = "stand-in-org/qwen3-8b-copy"
WEIGHTS = b"\x17" * 3_000_000
KEY_ENV = "LLMGW_HUB_WIZARD_KEY"
ADAPTER_REPO = "stand-in-org/sql-lora"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
QWEN3_8B = Widths(hidden=4096, intermediate=12288, heads=32, kv_heads=8, layers=36)
NODE = "h100-a-01"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    if not (FIXTURE / "config.json").exists():
        pytest.skip(f"the shared model fixtures are absent ({FIXTURE})")
    monkeypatch.setenv(KEY_ENV, "sk-hub-wizard-key")
    with LocalHub() as running:
        running.repos[REPO] = FakeRepo(
            files={"config.json": FIXTURE / "config.json", "model.safetensors": WEIGHTS}
        )
        adapter = write_peft_adapter(
            tmp_path / "sql-lora", QWEN3_8B, rank=4, targets=("q_proj",), base_model=REPO
        )
        running.repos[ADAPTER_REPO] = FakeRepo(
            files={name: adapter / name for name in ("adapter_config.json", ADAPTER_WEIGHTS)}
        )
        point_hub_at(running.endpoint, tmp_path, monkeypatch)
        yield running


def test_the_wizard_serves_a_hub_model_its_weights_fetched_and_its_key_in_front(
    hub: LocalHub, tmp_path: Path
):
    asyncio.run(_serve_from_the_hub(hub, tmp_path))


async def _serve_from_the_hub(hub: LocalHub, tmp_path: Path) -> None:
    async with demo_part(tmp_path / "demo", [NODE]) as demo:
        await _on_the_node_and_its_hub(demo, hub)


async def _on_the_node_and_its_hub(demo: Any, hub: LocalHub) -> None:
    for server in demo.servers.values():
        server.env["HF_ENDPOINT"] = hub.endpoint  # the node's own Hub (a mirror, here)
        # Its python3 has huggingface_hub, as a serving node's has (this one's venv).
        server.env["PATH"] = (
            f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        )
    app, feed = console_on(demo)
    async with app.run_test(size=(140, 44)) as pilot:
        await until(pilot, lambda: ready_nodes(app) == 1, "the fleet", 60)
        wizard = await screen_after(pilot, app, "5", ServeScreen, "the wizard")
        await pilot.press(*REPO, "enter")
        await until(pilot, lambda: wizard.step == "way", "the ways, planned from the Hub", 60)
        assert wizard.plan_body is not None and wizard.way is not None
        await pilot.press("enter")
        await until(pilot, lambda: wizard.step == "size" and wizard.blocked is None, "its fit")
        await pilot.press("ctrl+n")
        await until(pilot, lambda: wizard.step == "extras", "the extras page")
        wizard.query_one("#serve-key").value = KEY_ENV
        wizard.query_one("#serve-adapters").value = f"sql={ADAPTER_REPO}"
        await until(pilot, lambda: wizard.blocked is None, "valid extras")
        name = wizard.query_one("#serve-name").value
        await pilot.press("ctrl+n")
        await until(
            pilot, lambda: wizard.step == "confirm" and wizard.blocked is None, "the preview"
        )
        replicas = await screen_after(pilot, app, "ctrl+n", ReplicasScreen, "the replicas")
        view = await replica_ready(pilot, replicas, name, f"{name} ready, its weights fetched", 150)
        assert (view.spec.get("request") or {}).get("hub_repo") == REPO
        served = [path for _m, path, _r, sent in hub.log.requests if sent]
        assert any(path.endswith("/model.safetensors") for path in served), served
        home = demo.servers[NODE].home
        fetched = [p for p in home.rglob("model.safetensors") if p.is_file()]
        assert fetched and fetched[0].read_bytes() == WEIGHTS, fetched
        # The adapter: fetched to the node's model folder, and its engine loads it from there.
        (held,) = view.adapters
        assert held["name"] == "sql" and held["source"].endswith(ADAPTER_REPO), held
        got = home.rglob(ADAPTER_WEIGHTS)
        assert [p.read_bytes() for p in got] == [
            hub.repos[ADAPTER_REPO].files[ADAPTER_WEIGHTS].read_bytes()
        ]
        argv = view.shards[0].argv
        assert held["source"] in argv[argv.index("--lora-modules") + 1]
        await key_in_front(feed, view, KEY_ENV)
        await feed.stop_replica(name)
