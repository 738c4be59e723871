"""The fleet's table draws each cell once per content and size, and draws exactly what
Textual's own `DataTable` draws: the same segments, cell by cell and line by line, in
every state a cell is drawn in (cursor, hover, zebra rows, an updated cell)."""

from __future__ import annotations

import asyncio

from rich.text import Text
from textual.app import App, ComposeResult
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from llmgw_tui.widgets.table import SteadyTable

ROWS: list[tuple[list[Text], int]] = [
    ([Text("b200-rack01-t01", style="bold"), Text("ready", style="green"), Text("-")], 1),
    (
        [Text("dgx-h100-07"), Text("degraded", style="yellow"), Text("h100-80g 8/8\na100 2/4")],
        2,
    ),
    ([Text(""), Text("unreachable", style="bold red"), Text("CPU, 1024 GiB RAM")], 1),
    ([Text("a-name-far-too-long-for-its-column-" * 3), Text("x\ty"), Text("节点 ✓")], 1),
    ([Text("mig"), Text("ready"), Text("1g.10gb 7/7\n2g.20gb 0/3\n3g.40gb 1/2")], 3),
    ([Text("cut", style="underline"), Text("a\nb\nc\nd"), Text("two\nlines")], 2),
]
"""Cells of the kinds the fleet draws (styled words, several lines, empty, wide characters,
a tab, text longer than its column, more lines than the row is high), on rows 1 to 3 high."""


class Tables(App[None]):
    def compose(self) -> ComposeResult:
        for table in (DataTable(id="textual"), SteadyTable(id="steady")):
            table.cursor_type = "row"
            table.zebra_stripes = True
            table.styles.height = 12
            table.add_column("NODE", key="node", width=20)  # a fixed width cuts the long name
            table.add_column("STATE", key="state")
            table.add_column("CARDS", key="cards")
            for number, (cells, height) in enumerate(ROWS * 3):
                table.add_row(*(c.copy() for c in cells), key=f"row{number}", height=height)
            yield table


def lines_of(table: DataTable[object]) -> list[list[tuple[str, object]]]:
    """Every line of the table as drawn now, as (text, style) pairs."""
    return [[(s.text, s.style) for s in strip] for strip in table.render_lines(table.size.region)]


def cells_of(table: DataTable[object]) -> list[object]:
    """Every body cell in every state it can be drawn in (cursor, hover, each zebra style)."""
    widths = [column.get_render_width(table) for column in table.ordered_columns]
    drawn: list[object] = []
    for row in range(table.row_count):
        for column, width in enumerate(widths):
            for cursor in (False, True):
                for hover in (False, True):
                    style = table._get_row_style(row, table.rich_style)
                    drawn.append(table._render_cell(row, column, style, width, cursor, hover))
    return drawn


def test_the_steady_table_draws_what_textual_s_table_draws_in_every_state():
    async def run() -> list[tuple[str, object, object]]:
        app = Tables()
        compared: list[tuple[str, object, object]] = []
        async with app.run_test(size=(100, 30)) as pilot:
            textual, steady = app.query_one("#textual", DataTable), app.query_one(SteadyTable)
            app.set_focus(None)  # a focused table's header is drawn in another colour
            await pilot.pause()

            def compare(what: str) -> None:
                compared.append((f"{what}: lines", lines_of(textual), lines_of(steady)))
                compared.append((f"{what}: cells", cells_of(textual), cells_of(steady)))

            compare("as added")
            for table in (textual, steady):
                table.move_cursor(row=4)
                table.hover_coordinate = Coordinate(1, 0)
                table._show_hover_cursor = True
            await pilot.pause()
            compare("cursor and hover moved")
            for table in (textual, steady):
                table.update_cell("row1", "state", Text("ready", style="green"))
                table.update_cell("row4", "cards", Text("1g.10gb 6/7\n2g.20gb 3/3\n3g.40gb 2/2"))
                table.scroll_to(y=9, animate=False)
            await pilot.pause()
            compare("cells updated, scrolled")
        return compared

    compared = asyncio.run(run())
    assert len(compared) == 6
    for what, expected, got in compared:
        assert got == expected, what


def test_a_cell_is_drawn_once_however_often_the_cursor_passes_it():
    async def run() -> tuple[int, int]:
        app = Tables()
        async with app.run_test(size=(100, 30)) as pilot:
            steady = app.query_one(SteadyTable)
            await pilot.pause()
            steady.focus()
            drawn = len(steady._drawn_cells)
            for _ in range(6):
                await pilot.press("down")
            await pilot.press("up", "up")
            steady.update_cell("row0", "state", Text("degraded"))  # one new cell
            await pilot.pause()
            return drawn, len(steady._drawn_cells)

    before, after = asyncio.run(run())
    assert before > 0
    assert after == before + 1


def test_rows_drawn_ahead_are_shown_without_drawing_them_again():
    async def run() -> tuple[int, int, int, int]:
        app = Tables()
        async with app.run_test(size=(100, 30)) as pilot:
            steady = app.query_one(SteadyTable)
            await pilot.pause()
            shown = len(steady._drawn_cells)
            steady.warm_all()
            while steady._to_warm:
                await pilot.pause(0.01)
            every = len(steady._drawn_cells)
            steady.scroll_end(animate=False)
            await pilot.pause()
            cells = {
                id(cell)  # Textual holds one empty text for every empty cell
                for row in range(steady.row_count)
                for cell in steady._get_row_renderables(row).cells
            }
            return shown, every, len(steady._drawn_cells), len(cells)

    shown, every, after_paging, cells = asyncio.run(run())
    assert shown < every == cells
    assert after_paging == every
