"""Doctor: every node's checks (or one node's), worst first, each with its fix.

The checks are the agent's own (`doctor` on each node, through the feed);
this screen asks every ready node at once in a worker and sorts what comes
back: FAIL, then WARN, then PASS.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar, cast

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from llmgw_core.errors import LlmgwError
from llmgw_tui.cells import plain
from llmgw_tui.messages import DoctorRowsRead
from llmgw_tui.textual_hooks import Guarded
from llmgw_tui.theme import theme_style
from llmgw_tui.widgets.header import TitleBar

SEVERITY = {"fail": 0, "warn": 1, "pass": 2}
STATUS_COLOURS = {"fail": "error", "warn": "warning", "pass": "success"}
AT_ONCE = 8
"""Nodes asked at the same time."""


def worst_first(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """FAIL before WARN before PASS; by node, then check, within each."""
    return sorted(
        rows, key=lambda r: (SEVERITY.get(r["status"].lower(), -1), r["node"], r["check"])
    )


class DoctorScreen(Guarded, Screen[None]):
    """The doctor's checks of the fleet, or of `node`."""

    BINDING_GROUP_TITLE = "Doctor"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "run_again", "Run again", id="doctor-again"),
        Binding("escape", "back", "Back", id="doctor-back"),
    ]

    def __init__(self, node: str | None = None) -> None:
        super().__init__()
        self.node = node
        self.rows: list[dict[str, str]] = []

    def compose(self) -> ComposeResult:
        """A status line and one row per check."""
        yield TitleBar(icon="▦")
        self._doctor_status = Static(
            "asking the nodes…", id="doctor-status", classes="status", markup=False
        )
        yield self._doctor_status
        table: DataTable[object] = DataTable(id="doctor-checks", classes="fill", cursor_type="row")
        self._doctor_checks = table
        table.add_columns("STATUS", "NODE", "CHECK", "WHAT IT SAYS")
        yield table
        self._doctor_detail = Static("", id="doctor-detail", classes="detail", markup=False)
        yield self._doctor_detail
        yield Footer()

    def on_mount(self) -> None:
        """Run the checks."""
        self.title = "llmgw"
        self.sub_title = f"doctor {self.node}" if self.node else "doctor: every node"
        self._doctor_checks.focus()
        self.run_checks()

    def action_run_again(self) -> None:
        """Ask the nodes again."""
        self._doctor_status.update("asking the nodes…")
        self.run_checks()

    def action_back(self) -> None:
        """Leave the doctor."""
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()

    @work(group="doctor", exclusive=True, exit_on_error=False, description="Doctor")
    async def run_checks(self) -> None:
        """Every ready node's checks (a node that fails to answer is one FAIL row)."""
        feed = self.console_app.feed
        fleet = self.console_app.fleet
        if self.node is not None:
            names = [self.node]
        else:
            names = [n.name for n in fleet.nodes if n.state == "ready"] if fleet else []
        gate = asyncio.Semaphore(AT_ONCE)

        async def one(name: str) -> list[dict[str, str]]:
            async with gate:
                try:
                    checks = await feed.doctor(name)
                except LlmgwError as exc:
                    return [
                        {
                            "node": name,
                            "check": "answer",
                            "status": "fail",
                            "message": exc.sentence(),
                            "fix": "",
                        }
                    ]
            return [{"node": name, **check} for check in checks]

        found = await asyncio.gather(*(one(name) for name in names))
        self.post_message(DoctorRowsRead(([row for rows in found for row in rows], len(names))))

    def on_doctor_rows_read(self, read: DoctorRowsRead) -> None:
        """Draw every node's checks, worst first."""
        rows, nodes = cast("tuple[list[dict[str, str]], int]", read.found)
        self.show(rows, nodes)

    def show(self, rows: list[dict[str, str]], nodes: int) -> None:
        """The rows worst first, and the counts."""
        self.rows = worst_first(rows)
        counts = {s: sum(r["status"].lower() == s for r in rows) for s in SEVERITY}
        self._doctor_status.update(
            f"{nodes} node{'' if nodes == 1 else 's'} · {counts['fail']} fail · "
            f"{counts['warn']} warn · {counts['pass']} pass"
            if nodes
            else "No node is ready to ask."
        )
        table = self._doctor_checks
        table.clear()
        for row in self.rows:
            status = row["status"].lower()
            colour = STATUS_COLOURS.get(status, "foreground")
            table.add_row(
                Text(status.upper(), style=theme_style(self.app, colour, bold=True)),
                plain(row["node"]),
                plain(row["check"]),
                plain(row.get("message") or ""),
            )
        self._show_detail(0)

    @on(DataTable.RowHighlighted, "#doctor-checks")
    def _row_moved(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail(event.cursor_row)

    def _show_detail(self, index: int) -> None:
        """The whole sentence and the fix of the check under the cursor."""
        detail = self._doctor_detail
        if not 0 <= index < len(self.rows):
            detail.update("")
            return
        row = self.rows[index]
        fix = row.get("fix") or ""
        detail.update(
            f"{row['node']} {row['check']}: {row.get('message') or ''}"
            + (f"\nFix: {fix}" if fix else "")
        )
