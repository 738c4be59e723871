"""Gateways (mode 6): each running gateway, its workers' health, and what it counted.

Rows are keyed by gateway name and updated in place as the feed is polled;
the workers of the gateway under the cursor are listed below with the
requests the front sent each and the failures it counted. Every figure is
the core's (`metrics.gateway.gateway_details`). `l` opens the gateway's log,
`x` stops it after a confirmation.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, cast

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Static

from llmgw_core.errors import LlmgwError
from llmgw_tui.cells import redraw_table, state_cell
from llmgw_tui.kept_screen import KeptScreen
from llmgw_tui.messages import GatewaysRead, OpenLogs
from llmgw_tui.screens.replicas import ConfirmStop
from llmgw_tui.widgets.footer import SteadyFooter
from llmgw_tui.widgets.header import TitleBar

GATEWAY_COLUMNS = (
    ("name", "GATEWAY"),
    ("node", "NODE"),
    ("port", "PORT"),
    ("policy", "POLICY"),
    ("phase", "PHASE"),
    ("workers", "HEALTHY"),
    ("requests", "REQUESTS"),
    ("errors", "ERRORS"),
    ("queued", "QUEUED"),
)
WORKER_COLUMNS = ("WORKER", "MODEL", "HEALTH", "REQUESTS", "FAILURES")
USAGE_COLUMNS = ("DAY (UTC)", "KEY", "MODEL", "REQUESTS", "ANSWERED", "PROMPT", "COMPLETION")
POLL_S = 2.0
"""Each read asks every node for its shards and every front for its workers and samples."""


def count_cell(value: float | None) -> str:
    """A front's counter as a whole number; `-` when its samples could not be read."""
    return "-" if value is None else f"{value:.0f}"


class GatewayTable(DataTable[object]):
    """The gateways; Enter opens the log of the one under the cursor."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Log", show=False, id="gateways-enter"),
    ]


class GatewaysScreen(KeptScreen[None]):
    """Every running gateway: address, policy, workers with health, requests, errors and the
    requests waiting at a fair front for their turn."""

    BINDING_GROUP_TITLE = "Gateways"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "logs", "Log", id="gateways-logs"),
        Binding("u", "usage", "Usage", id="gateways-usage"),
        Binding("x", "stop", "Stop", id="gateways-stop"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.details: list[dict[str, Any]] = []
        """The gateways as the feed last gave them (`gateway_details`)."""
        self._shown: list[str] = []

    def compose(self) -> ComposeResult:
        """Status line, the gateways, the workers of the one selected, why counts are missing."""
        yield TitleBar(icon="▦")
        self._gateways_status = Static(
            "reading the gateways…", id="gateways-status", classes="status", markup=False
        )
        yield self._gateways_status
        table = GatewayTable(
            id="gateway-table", classes="upper", cursor_type="row", zebra_stripes=True
        )
        self._gateway_table = table
        for key, label in GATEWAY_COLUMNS:
            table.add_column(label, key=key)
        yield table
        self._gateway_reason = Static("", id="gateway-reason", classes="reason", markup=False)
        yield self._gateway_reason
        workers: DataTable[object] = DataTable(
            id="gateway-workers", classes="fill below", cursor_type="none"
        )
        self._gateway_workers = workers
        workers.add_columns(*WORKER_COLUMNS)
        yield workers
        self._usage_title = Static("", id="gateway-usage-title", classes="status", markup=False)
        yield self._usage_title
        usage: DataTable[object] = DataTable(id="gateway-usage", classes="fill", cursor_type="none")
        self._usage = usage
        usage.add_columns(*USAGE_COLUMNS)
        yield usage
        yield SteadyFooter()

    def on_mount(self) -> None:
        """The table has the keys."""
        self.title = "llmgw"
        self.sub_title = "gateways"
        self._usage_title.display = self._usage.display = False
        self._gateway_table.focus()

    def on_first_show(self) -> None:
        """Start reading (the first time the screen is shown)."""
        self.poll_gateways()

    @work(group="gateways-poll", exclusive=True, exit_on_error=False, description="Gateways")
    async def poll_gateways(self) -> None:
        """Read the gateways every few seconds; a failed read is a red line, and reading goes on."""
        feed = self.console_app.feed
        while True:
            if not self.is_current:
                # Another mode (or a log over this one) is shown: no node or front is asked.
                await asyncio.sleep(POLL_S)
                continue
            try:
                self.post_message(GatewaysRead(await feed.gateway_details()))
            except LlmgwError as exc:
                self.post_message(GatewaysRead(error=exc.sentence()))
            if feed.refresh_s is None:
                return
            await asyncio.sleep(POLL_S)

    def show(self, details: list[dict[str, Any]]) -> None:
        """Update rows in place (keyed by name), then the selected gateway's workers."""
        self.details = details
        answering = sum(1 for d in details if not d.get("error"))  # its front listed its workers
        count = len(details)
        self._status(f"{count} gateway{'' if count == 1 else 's'} running · {answering} answering")
        table = self._gateway_table
        names = [str(d.get("name")) for d in details]
        with self.app.batch_update():
            if names != self._shown:
                selected = self.selected()
                table.clear()
                for detail in details:
                    table.add_row(*self._cells(detail).values(), key=str(detail.get("name")))
                self._shown = names
                if selected in names:
                    table.move_cursor(row=names.index(selected))
                self.call_after_refresh(redraw_table, table)
            else:
                for detail in details:
                    for column, value in self._cells(detail).items():
                        if table.get_cell(str(detail.get("name")), column) != value:
                            table.update_cell(str(detail.get("name")), column, value)
            self._show_workers()

    def _cells(self, detail: dict[str, Any]) -> dict[str, object]:
        workers = detail.get("workers") or {}
        healthy = sum(1 for w in workers.values() if w.get("healthy"))
        requests = [w.get("requests") for w in workers.values()]
        total = None if any(r is None for r in requests) else sum(requests)
        phase = str(detail.get("phase"))
        return {
            "name": Text(str(detail.get("name")), style="bold"),
            "node": Text(str(detail.get("node"))),
            "port": Text(str(detail.get("port"))),
            "policy": Text(str(detail.get("policy"))),
            "phase": self._coloured(phase, "ready" if phase == "running" else "connecting"),
            "workers": Text(f"{healthy}/{len(workers)}"),
            "requests": Text(count_cell(total if workers else 0.0)),
            "errors": Text(count_cell(detail.get("errors"))),
            "queued": Text(count_cell(detail.get("queued"))),
        }

    def _coloured(self, word: str, state: str) -> Text:
        """`word` in the colour the console gives `state`."""
        cell = state_cell(self.app, state)
        cell.plain = word
        return cell

    def _show_workers(self) -> None:
        detail = self.selected_detail()
        workers = self._gateway_workers
        reason = self._gateway_reason
        workers.clear()
        if detail is None:
            reason.update("No gateway runs. The Serve wizard's last page puts replicas behind one.")
            return
        said = [detail[key] for key in ("error", "counts_error") if detail.get(key)]
        reason.update("\n".join(said))
        for url, worker in sorted((detail.get("workers") or {}).items()):
            health = {True: "healthy", False: "unhealthy"}.get(worker.get("healthy"), "unknown")
            workers.add_row(
                url,
                str(worker.get("model")),
                self._coloured(health, "ready" if health == "healthy" else "unreachable"),
                count_cell(worker.get("requests")),
                count_cell(worker.get("failures")),
            )
        self.call_after_refresh(redraw_table, workers)

    def _status(self, sentence: str, *, error: bool = False) -> None:
        status = self._gateways_status
        status.update(sentence)
        status.set_class(error, "-error")

    def selected(self) -> str | None:
        """The name of the gateway under the cursor."""
        table = self._gateway_table
        if not self._shown or table.cursor_row >= len(self._shown):
            return None
        return self._shown[table.cursor_row]

    def selected_detail(self) -> dict[str, Any] | None:
        """The gateway under the cursor, as the feed last gave it."""
        name = self.selected()
        return next((d for d in self.details if d.get("name") == name), None)

    @on(DataTable.RowHighlighted, "#gateway-table")
    def _row_moved(self) -> None:
        self._show_workers()

    @on(DataTable.RowSelected, "#gateway-table")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_logs()

    def _need_detail(self) -> dict[str, Any] | None:
        detail = self.selected_detail()
        if detail is None:
            self.notify("No gateway selected.", severity="warning")
        return detail

    def action_logs(self) -> None:
        """The log of the selected gateway, followed live."""
        detail = self._need_detail()
        if detail is not None:
            self.post_message(OpenLogs(str(detail["name"]), gateway=True))

    def action_usage(self) -> None:
        """What each client key of the selected gateway used, per UTC day and model (its
        access log, summed by its front), under its workers; `u` again reads it anew."""
        detail = self._need_detail()
        if detail is not None:
            self.read_usage(str(detail.get("name")))

    @work(group="gateway-usage", exclusive=True, exit_on_error=False, description="Usage")
    async def read_usage(self, name: str) -> None:
        try:
            found = await self.console_app.feed.gateway_usage(name)
        except LlmgwError as exc:
            self.notify(exc.sentence(), title="Usage", severity="error")
            return
        self._show_usage(found)

    def _show_usage(self, found: dict[str, Any]) -> None:
        from llmgw_core.gateway.run import USAGE_FIELDS

        table = self._usage
        table.clear()
        for row in found.get("usage", []):
            table.add_row(
                row["day"], row["key"], row["model"] or "-",
                *(f"{row[field]:,}" for field in USAGE_FIELDS),
            )  # fmt: skip
        for key, total in sorted((found.get("totals") or {}).items()):
            table.add_row(
                Text("all", style="bold"), Text(key, style="bold"), "",
                *(Text(f"{total[field]:,}", style="bold") for field in USAGE_FIELDS),
            )  # fmt: skip
        rows = len(found.get("usage", []))
        self._usage_title.update(
            f"usage of gateway {found.get('gateway')}: {rows} day·key·model"
            f"{'' if rows == 1 else 's'} in its access log (u reads it again)"
        )
        self._usage_title.display = table.display = True
        self.call_after_refresh(redraw_table, table)

    def action_stop(self) -> None:
        """Ask, then stop the selected gateway."""
        detail = self._need_detail()
        if detail is None:
            return
        name = str(detail["name"])
        question = (
            f"Stop gateway {name}? Its front on {detail.get('node')} ends; "
            "the replicas behind it keep running."
        )

        def answered(stop: bool | None) -> None:
            if stop:
                self.stop_gateway(name)

        self.app.push_screen(ConfirmStop(name, "", question=question), answered)

    @work(group="gateway-action", exit_on_error=False, description="Stopping")
    async def stop_gateway(self, name: str) -> None:
        """Stop the gateway; say so, then read the gateways again."""
        feed = self.console_app.feed
        try:
            result = await feed.stop_gateway(name)
        except LlmgwError as exc:
            self.notify(exc.sentence(), title="Stop", severity="error")
            return
        self.notify(f"gateway {name} on {result.get('node')} stopped.", title="Stop")
        try:
            self.post_message(GatewaysRead(await feed.gateway_details()))
        except LlmgwError as exc:
            self.post_message(GatewaysRead(error=exc.sentence()))

    def on_gateways_read(self, read: GatewaysRead) -> None:
        """Draw the gateways (or the sentence why they could not be read)."""
        if read.error is not None:
            self._status(read.error, error=True)
            return
        self.show(cast("list[dict[str, Any]]", read.found))
