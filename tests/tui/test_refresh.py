"""Live refresh: a new snapshot updates rows in place; the cursor and the page stay put."""

from __future__ import annotations

import asyncio

from textual.widgets import DataTable

from llmgw_core.facts import GpuProcess
from llmgw_core.fleet.state import FleetState
from llmgw_core.views.fleet import FleetSummary
from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import StaticFeed
from llmgw_tui.screens.node import NodeScreen


class SteppedFeed:
    """A feed that hands out the snapshots it is given, one per `advance`."""

    def __init__(self, states: list[FleetState], fabrics: dict) -> None:
        self.refresh_s: float | None = 0.01
        self._feeds = [StaticFeed(state, fabrics) for state in states]
        self._at = 0

    def advance(self) -> None:
        self._at = min(self._at + 1, len(self._feeds) - 1)

    async def snapshot(self) -> FleetSummary:
        return await self._feeds[self._at].snapshot()

    async def doctor(self, node: str) -> list[dict[str, str]]:
        return await self._feeds[self._at].doctor(node)

    async def refresh(self) -> None:
        return None

    async def close(self) -> None:
        return None


def with_node(fleet: FleetState, name: str, **changes) -> FleetState:
    nodes = dict(fleet.nodes)
    nodes[name] = nodes[name].model_copy(update=changes)
    return fleet.model_copy(update={"nodes": nodes})


def busy(state: FleetState, name: str, card: int) -> FleetState:
    """The same fleet with one process holding 70 GiB on one card of one node."""
    facts = state.nodes[name].facts
    gpus = list(facts.gpus)
    gpus[card] = gpus[card].model_copy(
        update={
            "memory_used_mib": 71680,
            "processes": (GpuProcess(pid=4242, name="vllm", used_mib=71680),),
        }
    )
    return with_node(state, name, facts=facts.model_copy(update={"gpus": tuple(gpus)}))


async def until(pilot, condition) -> None:
    for _ in range(100):
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError("the console never showed the change")


def test_a_node_going_unreachable_updates_its_row_and_keeps_the_cursor(demo_state):
    state, fabrics = demo_state
    later = with_node(state, "gb200-r1-t05", state="unreachable", reason="ssh: timed out")
    feed = SteppedFeed([state, later], fabrics)

    async def run() -> None:
        app = LlmgwApp(feed, animation="none")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            table = app.screen.query_one("#nodes", DataTable)
            await until(pilot, lambda: table.row_count == 23)
            await pilot.press("down", "down", "down")
            feed.advance()
            await until(pilot, lambda: str(table.get_cell("gb200-r1-t05", "state")) != "ready")
            assert str(table.get_cell("gb200-r1-t05", "state")) == "unreachable"
            assert table.cursor_row == 3
            assert table.row_count == 23
            reasons = app.screen.query_one("#fleet-reasons")
            assert str(reasons.render()) == "gb200-r1-t05 unreachable: ssh: timed out"
            assert "23 nodes · 22 ready · 94/98 GPUs free" in str(
                app.screen.query_one("#fleet-status").render()
            )

    asyncio.run(run())


def test_the_node_page_shows_a_card_taken_while_it_is_open(demo_state):
    state, fabrics = demo_state
    feed = SteppedFeed([state, busy(state, "h100-a-01", 2)], fabrics)

    async def run() -> None:
        app = LlmgwApp(feed, animation="none")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await until(pilot, lambda: app.fleet is not None)
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, NodeScreen)
            devices = app.screen.query_one("#devices", DataTable)
            feed.advance()
            await until(pilot, lambda: "70.0/79.6" in str(devices.get_cell("2", "memory")))
            fleet_row = app.fleet.nodes[0]
            assert [(c.gpu_class, c.free, c.total) for c in fleet_row.classes] == [
                ("h100-80g", 7, 8)
            ]

    asyncio.run(run())


class BrokenFeed:
    """A feed whose fleet cannot be opened: the inventory names a missing file."""

    refresh_s: float | None = None

    async def snapshot(self) -> FleetSummary:
        from llmgw_core.errors import BadInput

        raise BadInput("inventory /nowhere.yaml does not exist", "pass --inventory FILE")

    async def close(self) -> None:
        return None


class CrashingFeed(BrokenFeed):
    """A feed that fails with something no one expected."""

    async def snapshot(self) -> FleetSummary:
        raise OSError("address already in use")


def test_a_fleet_that_cannot_be_opened_is_a_red_notification_and_the_console_stays_up():
    async def run() -> None:
        for feed, words in [
            (BrokenFeed(), "inventory /nowhere.yaml does not exist"),
            (CrashingFeed(), "Polling the fleet stopped: address already in use"),
        ]:
            app = LlmgwApp(feed, animation="none")
            async with app.run_test(size=(120, 40), notifications=True) as pilot:
                await until(pilot, lambda app=app: bool(app._notifications))
                [notification] = list(app._notifications)
                assert notification.severity == "error"
                assert words in notification.message
                status = app.screen.query_one("#fleet-status")
                assert status.has_class("-error") and words in str(status.render())
                await pilot.press("2")
                await pilot.pause()
                assert app.is_running

    asyncio.run(run())


def test_a_mig_instance_destroyed_while_the_page_is_open_leaves_the_table(demo_state):
    state, fabrics = demo_state
    facts = state.nodes["a100-mig-01"].facts
    fewer = with_node(
        state,
        "a100-mig-01",
        facts=facts.model_copy(
            update={"gpus": tuple(g for g in facts.gpus if g.label != "0/mig3")}
        ),
    )
    feed = SteppedFeed([state, fewer], fabrics)

    async def run() -> None:
        app = LlmgwApp(feed, animation="none")
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.fleet is not None)
            await app.run_action("open_node('a100-mig-01')")
            await pilot.pause()
            devices = app.screen.query_one("#devices", DataTable)
            assert "0/mig3" in devices.rows
            feed.advance()
            await until(pilot, lambda: "0/mig3" not in devices.rows)
            assert devices.row_count == 5

    asyncio.run(run())


def test_the_node_page_of_a_node_that_goes_unreachable_turns_red_by_its_state_class(demo_state):
    state, fabrics = demo_state
    later = with_node(state, "h100-a-01", state="unreachable", reason="ssh: connection refused")
    feed = SteppedFeed([state, later], fabrics)

    async def run() -> None:
        app = LlmgwApp(feed, animation="none")
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.fleet is not None)
            await pilot.press("enter")
            await pilot.pause()
            summary = app.screen.query_one("#node-summary")
            assert summary.has_class("-ready")
            feed.advance()
            await until(pilot, lambda: summary.has_class("-unreachable"))
            assert not summary.has_class("-ready")
            assert "ssh: connection refused" in str(summary.render())

    asyncio.run(run())


def test_a_node_that_never_answered_has_a_page_that_says_so(demo_state):
    state, fabrics = demo_state
    silent = with_node(state, "l40s-01", state="unreachable", reason="ssh: no route", facts=None)
    feed = SteppedFeed([silent], fabrics)

    async def run() -> None:
        app = LlmgwApp(feed, animation="none")
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.fleet is not None)
            await app.run_action("open_node('l40s-01')")
            await pilot.pause()
            devices = app.screen.query_one("#devices", DataTable)
            assert str(devices.get_cell("none", "class")) == "no facts: it has not answered"
            doctor = app.screen.query_one("#doctor")
            await until(pilot, lambda: "no facts for 'l40s-01'" in str(doctor.render()))

    asyncio.run(run())


class DoctorCrashes(SteppedFeed):
    """A feed whose doctor fails with an error no one planned for."""

    async def doctor(self, node: str) -> list[dict[str, str]]:
        raise RuntimeError("the agent answered nonsense")


def test_a_doctor_that_crashes_says_so_in_its_place_and_the_page_stays(demo_state):
    state, fabrics = demo_state
    feed = DoctorCrashes([state], fabrics)

    async def run() -> None:
        app = LlmgwApp(feed, animation="none")
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            await until(pilot, lambda: app.fleet is not None)
            await app.run_action("open_node('h100-a-01')")
            await pilot.pause()
            doctor = app.screen.query_one("#doctor")
            await until(pilot, lambda: "the doctor stopped" in str(doctor.render()))
            assert "the agent answered nonsense" in str(doctor.render())
            assert isinstance(app.screen, NodeScreen)

    asyncio.run(run())
