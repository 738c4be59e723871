"""Driving the console by keyboard: help, command mode, filter, esc, Enter to a node page."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from live_walk import palette_answered, until
from textual.widgets import DataTable, Input, Static

from llmgw_tui.app import gateway_logs_target, logs_target
from llmgw_tui.commands import CommandError, parse_command
from llmgw_tui.screens.command_line import CommandLine
from llmgw_tui.screens.fleet import FleetScreen
from llmgw_tui.screens.help import HelpScreen
from llmgw_tui.screens.node import NodeScreen
from llmgw_tui.screens.racks import RacksScreen
from llmgw_tui.widgets.rack import RackWidget

SIZE = (120, 40)


async def ready(app, pilot) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()


def console_test(scenario: Callable[[Any, Any], Awaitable[None]]) -> Callable[..., None]:
    """A plain test that runs `scenario(app, pilot)` on the demo console (no asyncio plugin)."""

    def test(make_app: Callable[[], Any]) -> None:
        async def run() -> None:
            app = make_app()
            async with app.run_test(size=SIZE, notifications=True) as pilot:
                await ready(app, pilot)
                await scenario(app, pilot)

        asyncio.run(run())

    test.__name__ = scenario.__name__
    test.__doc__ = scenario.__doc__
    return test


def shown_nodes(app) -> list[str]:
    table = app.screen.query_one("#nodes", DataTable)
    return [str(row.key.value) for row in table.ordered_rows]


@console_test
async def test_enter_on_a_node_opens_its_page_and_esc_comes_back(app, pilot):
    await pilot.press("down", "enter")
    await pilot.pause()
    assert isinstance(app.screen, NodeScreen) and app.screen.node_name == "h100-a-02"
    devices = app.screen.query_one("#devices", DataTable)
    assert devices.row_count == 8
    await pilot.press("escape")
    await pilot.pause()
    assert isinstance(app.screen, FleetScreen)


@console_test
async def test_question_mark_lists_every_key_of_the_screen_and_esc_closes_it(app, pilot):
    await pilot.press("question_mark")
    await pilot.pause()
    assert isinstance(app.screen, HelpScreen)
    table = app.screen.query_one("#help-keys", DataTable)
    rows = {tuple(map(str, table.get_row_at(i))) for i in range(table.row_count)}
    for key, what in [("/", "Filter"), ("?", "Help"), (":", "Command"), ("2", "Racks")]:
        assert (key, what) in rows
    assert "Node page" in {what for _, what in rows}
    await pilot.press("escape")
    await pilot.pause()
    assert isinstance(app.screen, FleetScreen)


@console_test
async def test_slash_filters_the_fleet_and_esc_clears_the_filter(app, pilot):
    assert len(shown_nodes(app)) == 23
    await pilot.press("slash", *"l40s")
    await pilot.pause()
    assert shown_nodes(app) == ["l40s-01"]
    await pilot.press("enter", "escape")
    await pilot.pause()
    assert len(shown_nodes(app)) == 23
    assert not app.screen.query_one("#filter", Input).has_class("-visible")


@console_test
async def test_digits_typed_into_the_filter_are_text_not_screen_keys(app, pilot):
    await pilot.press("slash", *"t12")
    await pilot.pause()
    assert isinstance(app.screen, FleetScreen)
    assert shown_nodes(app) == ["gb200-r1-t12"]


@console_test
async def test_command_mode_racks_switches_to_the_racks_screen(app, pilot):
    await pilot.press("colon", *"racks", "enter")
    await pilot.pause()
    assert isinstance(app.screen, RacksScreen)
    await pilot.press("1")
    await pilot.pause()
    assert isinstance(app.screen, FleetScreen)


@console_test
async def test_command_mode_node_name_opens_that_node(app, pilot):
    await pilot.press("colon", *"node gb200-r1-t13", "enter")
    await pilot.pause()
    assert isinstance(app.screen, NodeScreen) and app.screen.node_name == "gb200-r1-t13"


@console_test
async def test_an_unknown_command_stays_open_with_a_red_line(app, pilot):
    await pilot.press("colon", *"serve-everything", "enter")
    await pilot.pause()
    assert isinstance(app.screen, CommandLine)
    line = app.screen.query_one("#command-error", Static)
    assert line.has_class("-error")
    assert str(line.render()).startswith("Unknown command :serve-everything.")
    await pilot.press("escape")
    await pilot.pause()
    assert isinstance(app.screen, FleetScreen)


@console_test
async def test_a_node_that_is_not_in_the_fleet_is_a_red_notification_not_a_page(app, pilot):
    await pilot.press("colon", *"node nowhere-01", "enter")
    await pilot.pause()
    assert isinstance(app.screen, FleetScreen)
    [notification] = list(app._notifications)
    assert notification.severity == "error"
    assert notification.message.startswith("No node called 'nowhere-01'.")


@console_test
async def test_the_palette_runs_the_same_action_as_the_key(app, pilot):
    await pilot.press("ctrl+p", *"racks")
    await until(pilot, lambda: palette_answered(app, "racks"), "the palette's answer", 10)
    await pilot.press("enter")
    await pilot.pause()
    assert isinstance(app.screen, RacksScreen)


@console_test
async def test_the_racks_screen_draws_each_tray_with_its_state(app, pilot):
    await pilot.press("2")
    await pilot.pause()
    (rack,) = app.screen.query(RackWidget)
    assert len(rack.trays) == 18
    assert [t.node for t in rack.trays if t.state == "not-joined"] == ["gb200-r1-t13"]
    assert [t.node for t in rack.trays if t.state == "degraded"] == ["gb200-r1-t07"]
    title, band, *trays = rack.render().plain.splitlines()
    assert title.startswith("NVLink domain") and band.strip() == "NVLink Switch"
    assert "NOT JOINED" in trays[12] and "degraded" in trays[6]


def test_logs_of_gateway_name_or_gw_name_name_a_gateway_and_anything_else_a_replica():
    assert gateway_logs_target("gateway front") == "front"
    assert gateway_logs_target("GW  front ") == "front"
    assert gateway_logs_target("gateway") is None
    assert gateway_logs_target("llama r1") is None
    assert logs_target("llama r1") == ("llama", 1)


def test_command_lines_parse_with_aliases_and_refuse_what_they_cannot_run():
    assert parse_command(":no").action == "show_fleet"
    assert parse_command("nvl").action == "show_racks"
    assert parse_command(":node h100-a-01").action == "open_node('h100-a-01')"
    assert parse_command(":plan").action == "show_plan"
    assert parse_command(":plan org/m").action == "open_plan('org/m')"
    assert parse_command(":logs llama r1").action == "open_logs('llama r1')"
    assert parse_command(":serve").action == "show_serve"
    for line, message in [
        (":node", ":node needs NAME."),
        (":racks now", ":racks takes no argument (got 'now')."),
        (
            "",
            "Type a command: :nodes, :racks, :node, :plan, :replicas, :serve, :gateways, :logs, "
            ":doctor, :fabric, :help, :quit.",
        ),
    ]:
        try:
            parse_command(line)
        except CommandError as error:
            assert str(error) == message
        else:
            raise AssertionError(f"{line!r} parsed")


@console_test
async def test_the_node_page_runs_the_doctor_and_shows_the_failing_check_first(app, pilot):
    await app.run_action("open_node('gb200-r1-t13')")
    await app.workers.wait_for_complete()
    await pilot.pause()
    doctor = str(app.screen.query_one("#doctor").render())
    first = doctor.splitlines()[0]
    assert first.startswith("✗ fabric")
    assert "status Insufficient Resources" in first
    await pilot.press("d")
    await app.workers.wait_for_complete()
    await pilot.pause()
    assert str(app.screen.query_one("#doctor").render()).splitlines()[0] == first


@console_test
async def test_the_palette_offers_plans_of_the_models_known_offline(app, pilot):
    await pilot.press("ctrl+p", *"plan Mixtral")
    await until(pilot, lambda: palette_answered(app, "plan Mixtral"), "the palette's answer", 10)
    await pilot.press("enter")

    def status() -> str:  # the plan screen may still be mounting (prepared in the background)
        found = app.screen.query("#plan-status")
        return str(found.first().render()) if found else ""

    await until(pilot, lambda: status() and not status().startswith("Planning"), "a plan", 30)
    assert status().startswith("mistralai/Mixtral-8x7B-Instruct-v0.1: planned for a")


@console_test
async def test_r_re_reads_the_facts_and_says_so(app, pilot):
    await pilot.press("r")
    await app.workers.wait_for_complete()
    await pilot.pause()
    assert [n.message for n in app._notifications] == ["Facts re-read from every ready node."]


def test_six_opens_the_gateways_screen_which_says_when_none_runs(make_app):
    async def run() -> None:
        from llmgw_tui.screens.gateways import GatewaysScreen

        app = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("6")

            def read() -> bool:  # the screen shows its first read of the gateways
                found = app.screen.query("#gateways-status")
                return bool(found) and found.first(Static).content != "reading the gateways…"

            await until(pilot, read, "the gateways read", 10)
            screen = app.screen
            assert isinstance(screen, GatewaysScreen)
            status = str(screen.query_one("#gateways-status", Static).content)
            assert status == "0 gateways running · 0 answering"
            reason = str(screen.query_one("#gateway-reason", Static).content)
            assert reason == (
                "No gateway runs. The Serve wizard's last page puts replicas behind one."
            )
            await pilot.press("x")
            await pilot.pause()
            assert app.screen is screen  # nothing to stop: no confirmation
            await pilot.press("colon", *"gw", "enter")
            await pilot.pause()
            assert app.screen is screen
            assert parse_command(":gateways").action == "show_gateways"

    asyncio.run(run())


@console_test
async def test_help_over_the_wizard_after_escape_leaves_the_keys_the_consoles(app, pilot):
    """Escape left the model field; `?` and Escape again must not put the focus back in it,
    or the next `:` is typed over what the field held (a stranger's walk found it)."""
    from llmgw_tui.screens.serve import ServeScreen

    await pilot.press("5")
    await until(pilot, lambda: isinstance(app.screen, ServeScreen), "the wizard")
    wizard = app.screen
    await pilot.press(*"catalog:meta", "escape", "question_mark")
    await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
    await pilot.press("escape")
    await until(pilot, lambda: app.screen is wizard, "the wizard again")
    await pilot.pause()
    assert not isinstance(app.focused, Input)
    await pilot.press("colon")
    await until(pilot, lambda: isinstance(app.screen, CommandLine), "the command line")
    assert wizard.query_one("#serve-model", Input).value == "catalog:meta"
    await pilot.press("escape")
    await until(pilot, lambda: app.screen is wizard, "the wizard once more")
    await pilot.press("escape")  # Escape again goes back into the field, as before
    await pilot.pause()
    assert app.focused is wizard.query_one("#serve-model", Input)
