"""The title line: the screen's title and sub-title centred, the icon opens the command
palette, a click elsewhere makes it three lines tall and another makes it one again."""

from __future__ import annotations

import asyncio

from textual.command import CommandPalette

from llmgw_tui.app import LlmgwApp
from llmgw_tui.widgets.header import TitleBar


def top_line(app: LlmgwApp) -> str:
    """The screen's top line as the terminal shows it."""
    return app.screen._compositor.render_strips()[0].text


def test_clicking_the_icon_opens_the_command_palette(make_app):
    async def run() -> bool:
        app: LlmgwApp = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.click(TitleBar, offset=(1, 0))
            await pilot.pause()
            return isinstance(app.screen, CommandPalette)

    assert asyncio.run(run())


def test_clicking_the_title_makes_the_header_tall_and_a_second_click_makes_it_one_line(make_app):
    async def run() -> tuple[int, int, int, str]:
        app: LlmgwApp = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            bar = app.screen.query_one(TitleBar)
            heights = [bar.size.height]
            for _ in range(2):
                await pilot.click(TitleBar, offset=(60, 0))
                await pilot.pause()
                heights.append(bar.size.height)
            return (*heights, str(bar.render()).strip())

    one, tall, again, words = asyncio.run(run())
    assert (one, tall, again) == (1, 3, 1)
    assert words.startswith("▦") and words.endswith("llmgw — fleet")


def test_a_new_sub_title_is_drawn_centred_on_the_title_line(make_app):
    async def run() -> tuple[str, str]:
        app: LlmgwApp = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            before = top_line(app)
            app.screen.sub_title = "fleet, filtered"
            await pilot.pause()
            return before, top_line(app)

    before, after = asyncio.run(run())
    assert before.strip().endswith("llmgw — fleet")
    assert after.strip().endswith("llmgw — fleet, filtered")
    words_at = after.index("llmgw")
    middle = 120 - 8 - 10
    assert words_at == 8 + (middle - len("llmgw — fleet, filtered")) // 2
