"""The footer is one line of keys: a click presses a key, the wheel shows the keys cut off,
and the key under the mouse is highlighted."""

from __future__ import annotations

import asyncio

from rich.style import Style
from textual import events

from llmgw_tui.app import LlmgwApp
from llmgw_tui.widgets.footer import SteadyFooter


def footer_line(footer: SteadyFooter) -> str:
    return footer.render().plain


def test_clicking_2_racks_in_the_footer_shows_the_racks(make_app):
    async def run() -> tuple[str, str]:
        app: LlmgwApp = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            footer = app.screen.query_one(SteadyFooter)
            column = footer_line(footer).index(" 2 Racks")
            before = app.current_mode
            await pilot.click(SteadyFooter, offset=(column + 1, 0))
            await pilot.pause()
            return before, app.current_mode

    before, after = asyncio.run(run())
    assert (before, after) == ("fleet", "racks")


def test_the_wheel_brings_the_quit_key_cut_off_at_120_columns_into_view(make_app):
    async def run() -> tuple[str, str, str]:
        app: LlmgwApp = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            footer = app.screen.query_one(SteadyFooter)
            first = footer_line(footer)
            row = app.size.height - 1
            for _ in range(10):  # the wheel turned over the footer, as the terminal driver posts it
                app.post_message(
                    events.MouseScrollDown(None, 10, row, 0, 1, 0, False, False, False, 10, row)
                )
                await pilot.pause()
            scrolled = footer_line(footer)
            clicked_at = scrolled.index(" q Quit")
            return first, scrolled, scrolled[clicked_at : clicked_at + 7]

    first, scrolled, quit_key = asyncio.run(run())
    assert "Quit" not in first and first.rstrip().endswith("^p Palette")
    assert quit_key == " q Quit"
    assert scrolled.rstrip().endswith("^p Palette") and len(scrolled) == 120


def test_the_key_under_the_mouse_is_drawn_on_the_hover_background(make_app):
    async def run() -> tuple[bool, bool, str]:
        app: LlmgwApp = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            footer = app.screen.query_one(SteadyFooter)
            column = footer_line(footer).index(" r Refresh")
            hover = footer.get_component_rich_style("footer--hover").bgcolor

            def refresh_key_on_hover_background() -> bool:
                return any(
                    isinstance(span.style, Style)
                    and span.style.bgcolor == hover
                    and span.start <= column < span.end
                    for span in footer.render().spans
                )

            assert hover != footer.rich_style.bgcolor, "the hover colour is the footer's own"
            before = refresh_key_on_hover_background()
            await pilot.hover(SteadyFooter, offset=(column + 1, 0))
            await pilot.pause()
            hovered = footer.key_at(column + 1)
            return before, refresh_key_on_hover_background(), hovered.description if hovered else ""

    before, after, hovered = asyncio.run(run())
    assert hovered == "Refresh"
    assert not before and after
