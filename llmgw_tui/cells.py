"""Table cells: the core's figures written as Rich text in theme colours.

Formatting only; no figure is computed here (a MiB figure shown in GiB is the
same figure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import App
from textual.widgets import DataTable

from llmgw_tui.theme import theme_style

if TYPE_CHECKING:
    from llmgw_core.views.fleet import ClassCount

STATE_COLOURS = {
    "ready": "success",
    "joined": "success",
    "connecting": "warning",
    "degraded": "warning",
    "unreachable": "error",
    "refused": "error",
    "not-joined": "error",
    "active": "success",
    "init": "warning",
    "armed": "warning",
    "polling": "warning",
    "down": "error",
    "local": "foreground",
    "unhealthy": "warning",
}
"""Which theme colour each state is drawn in."""

LINK_COLOURS = {"NV": "success", "PIX": "primary", "PXB": "primary", "PHB": "warning"}
"""Link kinds of `nvidia-smi topo -m` by colour: NVLink best, through the CPU worst."""


def state_cell(app: App[object], state: str) -> Text:
    """A state word in its colour."""
    colour = STATE_COLOURS.get(state.lower(), "foreground")
    return Text(state, style=theme_style(app, colour))


def classes_cell(app: App[object], classes: tuple[ClassCount, ...]) -> Text:
    """Free/total by class, one class a line: `h100-80g  8/8`; none free in the warning colour."""
    text = Text()
    for number, count in enumerate(classes):
        if number:
            text.append("\n")
        text.append(f"{count.gpu_class} ")
        colour = "success" if count.free else "warning"
        text.append(f"{count.free}/{count.total}", style=theme_style(app, colour))
    return text


def link_cell(app: App[object], kind: str) -> Text:
    """A link kind (`NV18`, `SYS` …) in its colour; the diagonal dimmed."""
    if kind == "X":
        return Text("X", style=theme_style(app, "panel-lighten-2"))
    prefix = "NV" if kind.startswith("NV") else kind
    return Text(kind, style=theme_style(app, LINK_COLOURS.get(prefix, "error")))


def plain(value: object) -> Text:
    """A value from a node as literal text: a table would read `[N/A]` in a str as markup."""
    return Text(str(value))


def gib(mib: int | None) -> str:
    """MiB shown as GiB with one decimal (`79.6`), or `-` when unknown."""
    return "-" if mib is None else f"{mib / 1024:.1f}"


def memory_cell(app: App[object], used_mib: int | None, total_mib: int | None) -> Text:
    """A memory bar of 10 cells and `used/total GiB`."""
    text = Text()
    if used_mib is not None and total_mib:
        filled = min(10, round(10 * used_mib / total_mib))
        colour = "success" if filled < 7 else "warning" if filled < 9 else "error"
        text.append("█" * filled, style=theme_style(app, colour))
        text.append("░" * (10 - filled), style=theme_style(app, "panel-lighten-2"))
        text.append(" ")
    text.append(f"{gib(used_mib)}/{gib(total_mib)}")
    return text


def optional(value: object, unit: str = "") -> Text:
    """A figure with its unit, or `n/a` where the hardware does not report it."""
    return Text("n/a" if value is None else f"{value}{unit}")


def redraw_table(table: DataTable[object]) -> None:
    """Drop a table's cached rows and draw it again.

    Rows drawn before the table measured new column widths stay cached at the
    old widths (textual 8.2.8): call this after the refresh that measured them.
    """
    table.notify_style_update()
    table.refresh()


def sync_rows(table: DataTable[object], rows: dict[str, dict[str, object]]) -> None:
    """Make a keyed table show `rows` (key → column → cell) without rebuilding it.

    Changed cells are updated in place, new rows appended, vanished rows
    removed: the cursor and the scroll position stay where the reader left them.
    """
    for gone in [k for k in table.rows if k.value not in rows]:
        table.remove_row(gone)
    for key, cells in rows.items():
        if key in table.rows:
            for column, value in cells.items():
                if table.get_cell(key, column) != value:
                    table.update_cell(key, column, value)
        else:
            table.add_row(*cells.values(), key=key)
