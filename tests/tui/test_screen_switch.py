"""Switching screens shows the kept screen as it was left, and still follows a theme change;
the footer redraws its keys only when they change."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Button, DataTable

from llmgw_tui.app import LlmgwApp
from llmgw_tui.widgets.footer import SteadyFooter


def footer_words(footer: SteadyFooter) -> list[str]:
    assert footer.keys is not None
    return [key.description for key in footer.keys[0]]


def test_fleet_racks_fleet_comes_back_to_the_same_table_with_the_cursor_on_its_node(make_app):
    async def run() -> tuple[bool, int, int, list[str], list[str], bool]:
        app: LlmgwApp = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            fleet = app.screen
            table = fleet.query_one("#nodes", DataTable)
            await pilot.press("down", "down")
            footer = fleet.query_one(SteadyFooter)
            keys_before = footer.keys
            words_before = footer_words(footer)
            await pilot.press("2")
            on_racks = app.current_mode == "racks"
            await pilot.press("1")
            await pilot.pause()
            same_keys = footer.keys is keys_before
            return (
                app.screen is fleet and on_racks,
                table.cursor_row,
                len(words_before),
                words_before,
                footer_words(footer),
                same_keys,
            )

    same_screen, cursor_row, key_count, before, after, same_keys = asyncio.run(run())
    assert same_screen
    assert cursor_row == 2
    assert key_count > 0 and "Filter" in before
    assert after == before
    assert same_keys, "the footer's keys were rebuilt although none changed"


def test_a_theme_changed_while_the_fleet_is_hidden_recolours_it_when_it_comes_back(make_app):
    async def run() -> tuple[str, str, str]:
        app: LlmgwApp = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            table = app.screen.query_one("#nodes", DataTable)
            dark = table.styles.background.hex
            await pilot.press("2")
            app.theme = "textual-light"
            await pilot.pause()
            await pilot.press("1")
            await pilot.pause()
            expected = app.get_css_variables()["surface"]
            return dark, table.styles.background.hex, expected

    dark, now, expected = asyncio.run(run())
    assert now != dark
    assert now.upper() == expected.upper()


class TwoPanes(App[None]):
    """Two buttons with the same keys, a third with its own."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit")]
    ENABLE_COMMAND_PALETTE = False

    def compose(self) -> ComposeResult:
        yield Button("one", id="one")
        yield Button("two", id="two")
        yield Own("own", id="own")
        yield SteadyFooter()


class Own(Button):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("x", "press", "Press it")]


def test_the_footer_shows_a_focused_widgets_own_key_and_keeps_its_keys_when_none_changed():
    async def run() -> tuple[list[str], bool, list[str], list[str]]:
        app = TwoPanes()
        async with app.run_test() as pilot:
            await pilot.pause()
            footer = app.query_one(SteadyFooter)
            app.query_one("#one").focus()
            await pilot.pause()
            first = footer.keys
            words_on_one = footer_words(footer)
            app.query_one("#two").focus()
            await pilot.pause()
            kept = footer.keys is first
            app.query_one("#own").focus()
            await pilot.pause()
            words_on_own = footer_words(footer)
            app.query_one("#one").focus()
            await pilot.pause()
            return words_on_one, kept, words_on_own, footer_words(footer)

    on_one, kept, on_own, back = asyncio.run(run())
    assert on_one == ["Quit"]
    assert kept
    assert sorted(on_own) == ["Press it", "Quit"]
    assert back == ["Quit"]
