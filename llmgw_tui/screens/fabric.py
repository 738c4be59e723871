"""Fabric test: two nodes rail by rail (`ib_write_bw`), or over TCP where perftest is missing.

The test is the `fabric-test` step's, run in a worker over the console's
fleet; while it runs the rails to test are listed as pending, then each row
shows its figure against the rail's rated speed, coloured by verdict.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, LoadingIndicator, Static
from textual.worker import Worker, WorkerState

from llmgw_core.errors import LlmgwError
from llmgw_tui.cells import plain
from llmgw_tui.messages import FabricTested
from llmgw_tui.textual_hooks import Guarded
from llmgw_tui.theme import theme_style
from llmgw_tui.widgets.header import TitleBar

VERDICT_COLOURS = {"pass": "success", "warn": "warning", "fail": "error", "untested": "accent"}


def figure(value: float | None) -> str:
    """A Gb/s figure as typed, `-` when unknown."""
    return "-" if value is None else f"{value:g}"


class FabricScreen(Guarded, Screen[None]):
    """The fabric between `node_a` and `node_b`, rail by rail."""

    BINDING_GROUP_TITLE = "Fabric"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "run_again", "Run again", id="fabric-again"),
        Binding("escape", "back", "Back", id="fabric-back"),
    ]

    def __init__(self, node_a: str, node_b: str) -> None:
        super().__init__()
        self.node_a = node_a
        self.node_b = node_b
        self.result: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        """Status, a progress indicator while it runs, the rails, the reasons."""
        yield TitleBar(icon="▦")
        self._fabric_status = Static("", id="fabric-status", classes="status", markup=False)
        yield self._fabric_status
        self._fabric_running = LoadingIndicator(id="fabric-running")
        yield self._fabric_running
        table: DataTable[object] = DataTable(id="fabric-rails", classes="short", cursor_type="row")
        self._fabric_rails = table
        table.add_columns("RAIL", "ADAPTERS", "RATED", "Gb/s", "RATIO", "VERDICT", "METHOD")
        yield table
        self._fabric_notes = Static("", id="fabric-notes", classes="reason", markup=False)
        yield self._fabric_notes
        yield Footer()

    def on_mount(self) -> None:
        """Start the test."""
        self.title = "llmgw"
        self.sub_title = f"fabric {self.node_a} ↔ {self.node_b}"
        self.action_run_again()

    def action_run_again(self) -> None:
        """Run the test (again)."""
        self._fabric_running.display = self.app.animation_level != "none"
        self._fabric_status.update(f"testing {self.node_a} ↔ {self.node_b}, one rail at a time…")
        self._pending_rails()
        self.run_test_pair()

    def _pending_rails(self) -> None:
        """The rails about to run, from the inventory's fabric of each node (pending)."""
        table = self._fabric_rails
        table.clear()
        fleet = self.console_app.fleet
        fabrics = (fleet.fabrics or {}) if fleet is not None else {}
        shared = set(fabrics.get(self.node_a, ())) & set(fabrics.get(self.node_b, ()))
        label = ", ".join(sorted(shared)) or "no shared fabric: TCP"
        table.add_row(
            plain("…"), plain(label), plain(""), plain(""), plain(""), Text("running"), plain("")
        )

    def action_back(self) -> None:
        """Leave the test."""
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()

    @work(group="fabric", exclusive=True, exit_on_error=False, description="Fabric test")
    async def run_test_pair(self) -> None:
        """Run the pair; the rows, or the sentence why it could not run."""
        feed = self.console_app.feed
        try:
            found = await feed.fabric_test(self.node_a, self.node_b)
        except LlmgwError as exc:
            self.post_message(FabricTested(error=exc.sentence()))
            return
        self.post_message(FabricTested(found))

    def on_fabric_tested(self, read: FabricTested) -> None:
        """Draw the rails (or the sentence why the test could not run)."""
        if read.error is not None:
            self._done(read.error, error=True)
            return
        result, error = cast("tuple[dict[str, Any], str | None]", read.found)
        self.show(result, error)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A test that died of an unexpected error says so where its rails would be."""
        if event.worker.group == "fabric" and event.state == WorkerState.ERROR:
            self._done(f"The fabric test stopped: {event.worker.error}", error=True)

    def _done(self, sentence: str, *, error: bool) -> None:
        self._fabric_running.display = False
        status = self._fabric_status
        status.update(sentence)
        status.set_class(error, "-error")

    def show(self, result: dict[str, Any], error: str | None) -> None:
        """One row per rail, coloured by verdict; the counts, and why a rail is not a figure."""
        self.result = result
        counts = result.get("counts") or {}
        summary = " · ".join(f"{counts.get(v, 0)} {v}" for v in VERDICT_COLOURS)
        self._done(
            error or f"{self.node_a} ↔ {self.node_b} on {result.get('fabric') or 'TCP'}: {summary}",
            error=bool(error),
        )
        table = self._fabric_rails
        table.clear()
        notes = []
        for row in result.get("rails") or []:
            colour = VERDICT_COLOURS.get(row["verdict"], "error")
            adapters = (
                row["adapter_a"]
                if row["adapter_a"] == row["adapter_b"]
                else f"{row['adapter_a'] or '-'}/{row['adapter_b'] or '-'}"
            )
            table.add_row(
                plain("-" if row["rail"] is None else str(row["rail"])),
                plain(adapters),
                plain(figure(row["rated_gbps"])),
                plain(figure(row["measured_gbps"])),
                plain(f"{row['ratio']:.0%}" if row["ratio"] is not None else "-"),
                Text(row["verdict"], style=theme_style(self.app, colour, bold=True)),
                plain(row["method"]),
            )
            if row["method"] == "tcp" or row["measured_gbps"] is None:
                notes.append(f"{adapters}: {row['reason']}")
        self._fabric_notes.update("\n".join(notes))
