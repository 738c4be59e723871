"""The footer is one line of keys: a click presses a key, the wheel shows the keys cut off,
and the key under the mouse is highlighted."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from rich.style import Style
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer

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


class Disabled(App[None]):
    """One key whose action is disabled (drawn dim), one that works."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "press_it", "Press it"),
        Binding("y", "count", "Count"),
    ]
    ENABLE_COMMAND_PALETTE = False

    def __init__(self) -> None:
        super().__init__()
        self.pressed = 0
        self.counted = 0

    def compose(self) -> ComposeResult:
        yield SteadyFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return None if action == "press_it" else True

    def action_press_it(self) -> None:
        self.pressed += 1

    def action_count(self) -> None:
        self.counted += 1


def test_a_disabled_key_is_drawn_dim_and_a_click_on_it_runs_nothing():
    async def run() -> tuple[bool, bool, int, int]:
        app = Disabled()
        async with app.run_test(size=(60, 5)) as pilot:
            await pilot.pause()
            footer = app.query_one(SteadyFooter)
            line = footer_line(footer)
            x_at, y_at = line.index(" x Press it"), line.index(" y Count")

            def dim_at(column: int) -> bool:
                return any(
                    isinstance(span.style, Style)
                    and span.style.dim
                    and span.start <= column < span.end
                    for span in footer.render().spans
                )

            await pilot.click(SteadyFooter, offset=(x_at + 1, 0))
            await pilot.click(SteadyFooter, offset=(y_at + 1, 0))
            await pilot.pause()
            return dim_at(x_at + 1), dim_at(y_at + 1), app.pressed, app.counted

    x_dim, y_dim, pressed, counted = asyncio.run(run())
    assert x_dim and not y_dim
    assert (pressed, counted) == (0, 1)


class DisabledWithPalette(Disabled):
    ENABLE_COMMAND_PALETTE = True


class TextualFooterApp(DisabledWithPalette):
    def compose(self) -> ComposeResult:
        yield Footer()


def bottom_cells(app: App[None]) -> list[tuple[str, object, object]]:
    """The bottom line as the terminal shows it: each cell's character and background, and a
    character's colour, bold and dim (a space shows only its background)."""

    async def run() -> list[tuple[str, object, object]]:
        async with app.run_test(size=(60, 5)) as pilot:
            await pilot.pause()
            await pilot.pause()
            strip = app.screen._compositor.render_strips()[-1]
            return [
                (char, style.bgcolor, None)
                if char == " "
                else (char, style.bgcolor, (style.color, bool(style.bold), bool(style.dim)))
                for segment in strip
                for char in segment.text
                for style in [segment.style or Style()]
            ]

    return asyncio.run(run())


def test_the_footer_draws_the_very_cells_of_textuals_footer_palette_and_disabled_key_included():
    ours, textual = bottom_cells(DisabledWithPalette()), bottom_cells(TextualFooterApp())
    assert "".join(cell[0] for cell in ours).rstrip().endswith("^p palette")
    assert ours == textual
