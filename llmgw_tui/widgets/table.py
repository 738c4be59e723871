"""A data table that draws each cell's text once, however often it is restyled.

Textual's `DataTable` renders a cell through Rich's whole pipeline (padding,
wrapping, cropping, then the row's styles) and caches the result under a key
that holds the row's position, the cursor, the hover and a counter bumped by
every `update_cell` or `add_row`. So a page of never-seen rows goes through
the whole pipeline cell by cell, and a poll that changes one cell sends every
cell on screen through it again (docs/scale.md has the figures).

This table splits the work where Textual's own renderable does (`Styled` is
"render, then apply the styles to each segment"): the expensive part, the
cell's text padded and cut to its width and height, is kept per cell object
and size; the cheap part, the row's, cursor's and hover's styles, is applied on
top each time. The lines are the very segments Textual would draw (a test
compares them cell by cell). Rows of a table can also be drawn ahead of time
(`warm`), a few at a time while the console is idle, so that paging to rows
never seen shows them at the cost of styling alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.timer import Timer
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

CELLS_KEPT = 40_000
"""Drawn cells kept (2,048 rows of 6 columns, at two widths each, fit)."""
WARM_ROWS_PER_STEP = 24
"""Rows drawn ahead per step while idle: one step is the most a key waits on this."""
WARM_PAUSE_S = 0.002
"""The timer between two steps: the loop takes keys and draws frames in between."""

Lines = list[list[Segment]]


class SteadyTable(DataTable[object]):
    """A `DataTable` whose `Text` cells are drawn once per content and size."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._drawn_cells: LRUCache[tuple[int, int, int], tuple[Text, Lines]] = LRUCache(CELLS_KEPT)
        self._to_warm: deque[RowKey | str] = deque()
        """Rows to draw ahead of their first showing (`warm`)."""
        self._warm_timer: Timer | None = None

    def _unstyled(self, cell: Text, width: int, height: int) -> Lines:
        """The cell padded, cut to `width` x `height`, before any table style."""
        key = (id(cell), width, height)
        kept = self._drawn_cells.get(key)
        if kept is not None and kept[0] is cell:
            return kept[1]
        options = self.app.console_options.update_dimensions(width, height)
        if height == 1:
            options = options.update(no_wrap=True)
        lines = self.app.console.render_lines(Padding(cell, (0, self.cell_padding)), options)
        self._drawn_cells[key] = (cell, lines)
        return lines

    def _plain_cell(self, row_index: int, column_index: int) -> tuple[Text, int] | None:
        """The row's `Text` cell and the row's height, where this table draws it itself."""
        if row_index < 0 or column_index < 0 or self.fixed_rows or self.fixed_columns:
            return None  # headers, labels and fixed cells: Textual's own path
        row_key = self._row_locations.get_key(row_index)
        row = self.rows.get(row_key) if row_key is not None else None
        if row is None or row.height < 1:
            return None  # an auto-height row is measured by Textual's path
        cell = self._get_row_renderables(row_index).cells[column_index]
        return (cell, row.height) if isinstance(cell, Text) else None

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> Lines:
        plain = self._plain_cell(row_index, column_index)
        if plain is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        cell, height = plain
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        if row_key is None or column_key is None:  # `_plain_cell` found both: never
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        key = (
            row_key,
            column_key,
            base_style,
            cursor,
            hover,
            self._show_hover_cursor,
            self._update_count,
            self._pseudo_class_state,
        )
        styled = self._cell_render_cache.get(key)
        if styled is not None:
            return styled
        component_style, post_style = self._get_styles_to_render_cell(
            False,
            False,
            False,
            hover,
            cursor,
            self.show_cursor,
            self._show_hover_cursor,
            self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )
        pre_style = (
            base_style + Style.from_meta({"row": row_index, "column": column_index})
        ) + component_style
        styled = [
            list(Segment.apply_style(line, style=pre_style, post_style=post_style))
            for line in self._unstyled(cell, width, height)
        ]
        self._cell_render_cache[key] = styled
        return styled

    def warm_all(self) -> None:
        """Draw every row ahead of its first showing, from the cursor down, then from the top."""
        self._to_warm.clear()
        keys = [row.key for row in self.ordered_rows]
        first = max(0, min(self.cursor_row, len(keys)))
        self.warm(keys[first:] + keys[:first])

    def warm(self, keys: Iterable[RowKey | str]) -> None:
        """Draw these rows ahead of their first showing, a few rows per step while idle.

        Each step is a timer of its own, so keys and frames go first; a row no
        longer in the table when its turn comes is skipped. A cell already drawn
        costs a lookup.
        """
        self._to_warm.extend(keys)
        if self._to_warm and self._warm_timer is None:
            self._warm_timer = self.set_timer(WARM_PAUSE_S, self._warm_step)

    def _warm_step(self) -> None:
        self._warm_timer = None
        if not self.is_mounted:
            return
        widths = [column.get_render_width(self) for column in self.ordered_columns]
        for _ in range(min(WARM_ROWS_PER_STEP, len(self._to_warm))):
            key = self._to_warm.popleft()
            if key not in self.rows:
                continue
            row_index = self.get_row_index(key)
            for column_index, width in enumerate(widths):
                plain = self._plain_cell(row_index, column_index)
                if plain is not None:
                    self._unstyled(plain[0], width, plain[1])
        if self._to_warm:
            self._warm_timer = self.set_timer(WARM_PAUSE_S, self._warm_step)
