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


def test_every_screen_of_ours_draws_its_title_line_with_the_one_title_bar():
    """Kept screens and pushed pages alike: one `TitleBar`, never Textual's four-widget `Header`."""
    import ast
    from pathlib import Path

    screens = Path(__file__).resolve().parents[2] / "llmgw_tui" / "screens"
    composing = []
    for path in sorted(screens.glob("*.py")):
        tree = ast.parse(path.read_text())
        calls = {
            node.func.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
        assert "Header" not in calls, path.name
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "compose":
                yielded = {
                    sub.value.func.id
                    for sub in ast.walk(node)
                    if isinstance(sub, ast.Yield)
                    and isinstance(sub.value, ast.Call)
                    and isinstance(sub.value.func, ast.Name)
                }
                composing.append((path.name, "TitleBar" in yielded))
    full_screens = {"doctor.py", "fabric.py", "fleet.py", "gateways.py", "logs.py", "node.py"}
    full_screens |= {"plan.py", "racks.py", "replicas.py", "serve.py"}
    assert {name for name, has_bar in composing if has_bar} == full_screens


def test_the_title_bar_draws_textuals_header_line_cell_by_cell():
    """The same characters in the same styles as Textual's `Header`, at two widths."""
    from rich.style import Style
    from textual.app import App, ComposeResult
    from textual.widgets import Header

    class Titled(App[None]):
        def __init__(self, bar: bool) -> None:
            super().__init__()
            self.bar = bar

        def compose(self) -> ComposeResult:
            yield TitleBar(icon="▦") if self.bar else Header(icon="▦")

        def on_mount(self) -> None:
            self.title = "llmgw"
            self.sub_title = "node h100-a-01"

    async def top(bar: bool, width: int) -> list[tuple[object, ...]]:
        """Each cell of the top line as a terminal shows it: character, colours, attributes."""
        app = Titled(bar)
        async with app.run_test(size=(width, 5)) as pilot:
            await pilot.pause()
            strip = app.screen._compositor.render_strips()[0]
            return [
                (
                    char,
                    style.bgcolor,
                    style.color if char.strip() else None,  # a blank's ink is not seen
                    bool(style.bold),
                    bool(style.dim),
                    bool(style.italic),
                    bool(style.underline),
                    bool(style.reverse),
                )
                for segment in strip
                for char in segment.text
                for style in (segment.style or Style(),)
            ]

    for width in (120, 60):
        ours = asyncio.run(top(True, width))
        assert ours == asyncio.run(top(False, width)), width
        assert "llmgw — node h100-a-01" in "".join(str(cell[0]) for cell in ours)
