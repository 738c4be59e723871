"""`llmgw-tui --metrics-port`: the console serves what it shows to Prometheus while it runs."""

from __future__ import annotations

import asyncio
import re
import socket
import time

import httpx
import pytest
from live_walk import until
from prometheus_client.parser import text_string_to_metric_families

from llmgw_core.fabric.rails import verdicts_to_record
from llmgw_core.fabric.verdicts import RailResult
from llmgw_core.facts import RailVerdict
from llmgw_core.fleet.state import FleetState
from llmgw_tui.app import LlmgwApp
from llmgw_tui.cli import main
from llmgw_tui.feed import StaticFeed
from llmgw_tui.offline_demo import demo_replica


async def _families(url: str) -> dict[str, list]:
    async with httpx.AsyncClient(timeout=5) as client:
        text = (await client.get(url)).text
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def _keeping(state: FleetState, run: dict, measured_at: float) -> FleetState:
    """The fleet as it reads after another console ran `run`: each node keeps its rails' verdicts."""
    results = [RailResult.model_validate(row) for row in run["rails"]]
    kept = verdicts_to_record(results, measured_at)
    nodes = {
        name: node.model_copy(
            update={
                "facts": node.facts.model_copy(
                    update={
                        "rail_verdicts": tuple(RailVerdict.model_validate(v) for v in kept[name])
                    }
                )
            }
        )
        if name in kept
        else node
        for name, node in state.nodes.items()
    }
    return state.model_copy(update={"nodes": nodes})


def test_the_console_exports_its_fleet_replicas_and_the_fabric_verdicts_its_nodes_keep(
    demo_state, h100_fabric_run
):
    state, fabrics = demo_state
    measured_at = state.taken_at.timestamp() - 600
    state = _keeping(state, h100_fabric_run[0], measured_at)
    view = demo_replica(state)
    feed = StaticFeed(state, fabrics, replicas=[view])

    async def run() -> None:
        # Port 0: the console takes a free port itself. A port found free beforehand can be
        # another test's server by the time it is bound (CI once scraped a stand-in engine).
        app = LlmgwApp(feed, animation="none", metrics_port=0)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(
                pilot, lambda: app.metrics_url is not None, "the metrics endpoint", timeout_s=30
            )
            assert re.fullmatch(r"http://127\.0\.0\.1:[0-9]+/metrics", app.metrics_url or "")
            families = await _families(app.metrics_url)
            assert {s.labels["node"] for s in families["llmgw_node_up"]} == set(state.nodes)
            joined = {
                s.value
                for s in families["llmgw_gpu_nvlink_joined"]
                if s.labels["node"] == "gb200-r1-t13"
            }
            assert joined == {0.0}
            (ready,) = families["llmgw_replica_ready_shards"]
            assert ready.labels == {"replica": view.name} and ready.value == len(view.shards)

            shown = [s for s in families["llmgw_fabric_rail_verdict"] if s.value == 1]
            rails = [r for r in h100_fabric_run[0]["rails"] if r["method"] == "ib_write_bw"]
            assert rails
            assert sorted((s.labels["adapter"], s.labels["verdict"]) for s in shown) == sorted(
                (r[f"adapter_{end}"], r["verdict"]) for r in rails for end in "ab"
            )
            assert {(s.labels["node"], s.labels["peer"]) for s in shown} == {
                ("h100-a-01", "h100-a-02"),
                ("h100-a-02", "h100-a-01"),
            }
            when = families["llmgw_fabric_rail_measured_timestamp_seconds"]
            assert {s.value for s in when} == {measured_at}
            url = app.metrics_url
        with pytest.raises(httpx.ConnectError):  # the console ended: so did its endpoint
            await _families(url)

    asyncio.run(run())


def test_a_metrics_port_already_taken_is_a_red_notification_and_the_console_stays_up(demo_state):
    state, fabrics = demo_state

    async def run() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            app = LlmgwApp(StaticFeed(state, fabrics), animation="none", metrics_port=port)
            async with app.run_test(size=(120, 40), notifications=True) as pilot:
                await until(pilot, lambda: bool(app._notifications), "a notification", timeout_s=30)
                [notification] = list(app._notifications)
                assert notification.severity == "error"
                assert notification.message.startswith(f"cannot serve metrics on 127.0.0.1:{port}")
                await pilot.press("2")
                await pilot.pause()
                assert app.is_running and app.metrics_url is None

    asyncio.run(run())


@pytest.mark.parametrize(
    ("argv", "sentence"),
    [
        (
            ["--metrics-port", "70000"],
            "argument --metrics-port: '70000' is not a port (0 to 65535)",
        ),
        (["--metrics-port", "http"], "argument --metrics-port: 'http' is not a port (0 to 65535)"),
        (["--metrics-host", "0.0.0.0"], "--metrics-host needs --metrics-port PORT"),
        (
            ["--metrics-port", "9464", "--run", "x.yaml"],
            "--metrics-port is for the console; a script serves with a `metrics:` step",
        ),
    ],
)
def test_a_bad_metrics_flag_is_one_sentence_and_exit_2(argv, sentence, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == f"llmgw-tui: error: {sentence}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_console_on_the_live_demo_fleet_exports_every_node_and_the_rails_it_tested():
    from llmgw_core.fleet.sim.demo import NOT_JOINED_TRAY, demo_nodes
    from llmgw_tui.feed import LiveFeed

    names = {node.name for node in demo_nodes()}

    async def run() -> None:
        feed = LiveFeed(inventory=None, demo=True, refresh_s=1.0)
        app = LlmgwApp(feed, animation="none", metrics_port=0)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(
                pilot, lambda: app.metrics_url is not None, "the metrics endpoint", timeout_s=30
            )
            families: dict[str, list] = {}
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                families = await _families(app.metrics_url)
                up = {s.labels["node"] for s in families.get("llmgw_node_up", []) if s.value == 1}
                if up == names:
                    break
                await pilot.pause(1.0)
            up = {s.labels["node"] for s in families["llmgw_node_up"] if s.value == 1}
            assert up == names
            tray = f"gb200-r1-t{NOT_JOINED_TRAY:02d}"
            joined = {
                s.value for s in families["llmgw_gpu_nvlink_joined"] if s.labels["node"] == tray
            }
            assert joined == {0.0}
            trays = {s.labels["node"] for s in families["llmgw_imex_up"]}
            assert trays == {name for name in names if name.startswith("gb200")}
            assert {s.labels["phase"] for s in families["llmgw_replicas"]} >= {"ready", "failed"}

            tested, _error = await feed.fabric_test("h100-a-01", "h100-a-02")
            assert tested["recorded"] == ["h100-a-01", "h100-a-02"]
            judged = {r["adapter_a"] for r in tested["rails"] if r["method"] == "ib_write_bw"}
            kept: set[str] = set()
            deadline = time.monotonic() + 30
            while kept != judged and time.monotonic() < deadline:
                await pilot.pause(0.5)
                families = await _families(app.metrics_url)
                kept = {
                    s.labels["adapter"]
                    for s in families.get("llmgw_fabric_rail_verdict", [])
                    if s.labels["node"] == "h100-a-01" and s.value == 1
                }
            assert judged and kept == judged

    asyncio.run(run())
