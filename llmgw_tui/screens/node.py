"""A node's page: its cards and MIG instances, the NVLink matrix, adapters, domain and IMEX."""

from __future__ import annotations

from typing import ClassVar, cast

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.markup import escape
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual.worker import Worker, WorkerState

from llmgw_core.errors import LlmgwError
from llmgw_core.views.fleet import FleetSummary, NodeDetail, NvlinkMatrix
from llmgw_core.views.replicas import shards_on_node
from llmgw_tui.cells import (
    link_cell,
    memory_cell,
    optional,
    plain,
    redraw_table,
    state_cell,
    sync_rows,
)
from llmgw_tui.messages import NodeDoctorRead, NodeShardsRead
from llmgw_tui.textual_hooks import Guarded
from llmgw_tui.theme import theme_style
from llmgw_tui.widgets.header import TitleBar

DEVICE_COLUMNS = (
    ("label", "GPU"),
    ("class", "CLASS"),
    ("memory", "MEMORY GiB"),
    ("util", "UTIL"),
    ("temp", "TEMP"),
    ("power", "POWER"),
    ("numa", "NUMA"),
    ("nic", "NEAREST NIC"),
    ("fabric", "NVLINK FABRIC"),
)
ADAPTER_COLUMNS = (
    ("name", "ADAPTER"),
    ("state", "STATE"),
    ("rate", "RATE"),
    ("layer", "LINK"),
)


NODE_STATES = ("connecting", "ready", "unreachable", "refused")
"""Each is a CSS class of the summary line (`-ready`, `-unreachable` …): the theme colours it."""

REPLICAS_EVERY_S = 15.0
"""How often the page reads the replicas on the node again (each read asks its agents)."""

CHECK_MARKS = {"pass": ("✓", "$success"), "warn": ("!", "$warning"), "fail": ("✗", "$error")}
"""How each doctor status is drawn."""


def doctor_content(checks: list[dict[str, str]]) -> Content:
    """The doctor's checks, one a line, worst first, with the fix under a check that did not pass."""
    order = {"fail": 0, "warn": 1, "pass": 2}
    lines = []
    for check in sorted(checks, key=lambda c: order.get(c["status"], 0)):
        mark, colour = CHECK_MARKS.get(check["status"], ("?", "$error"))
        lines.append(
            Content.from_markup(
                f"[{colour}]$mark $name[/] $message",
                mark=mark,
                name=f"{check['check']:<10}",
                message=check["message"],
            )
        )
        if check.get("fix") and check["status"] != "pass":
            lines.append(Content.from_markup("             [dim]fix: $fix[/]", fix=check["fix"]))
    return Content("\n").join(lines) if lines else Content("no checks")


class NodeScreen(Guarded, Screen[None]):
    """The page of one node, kept current as fleet snapshots arrive."""

    BINDING_GROUP_TITLE = "Node"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", id="node-back"),
        Binding("d", "doctor", "Doctor again", id="node-doctor"),
        Binding("tab", "focus_next", "Next table", show=False, id="node-next"),
    ]

    def __init__(self, node_name: str) -> None:
        super().__init__()
        self.node_name = node_name
        """The inventory name of the node shown."""
        self._matrix_shown: NvlinkMatrix | None = None

    def compose(self) -> ComposeResult:
        """A summary line, the devices, the NVLink matrix beside the adapters."""
        yield TitleBar(icon="▦")
        with VerticalScroll(id="node-body"):
            self._node_summary = Static("", id="node-summary", classes="status")
            yield self._node_summary
            devices: DataTable[object] = DataTable(
                id="devices", classes="devices", cursor_type="row"
            )
            self._devices = devices
            for key, label in DEVICE_COLUMNS:
                devices.add_column(label, key=key)
            yield devices
            with Horizontal(id="node-links"):
                with Vertical(id="matrix-box"):
                    yield Static("NVLink matrix", classes="section-title")
                    self._nvlink: DataTable[object] = DataTable(
                        id="nvlink", classes="nvlink", cursor_type="none", show_cursor=False
                    )
                    yield self._nvlink
                with Vertical(id="adapter-box", classes="adapters"):
                    yield Static("Adapters", classes="section-title")
                    adapters: DataTable[object] = DataTable(id="adapters", cursor_type="row")
                    self._adapters = adapters
                    for key, label in ADAPTER_COLUMNS:
                        adapters.add_column(label, key=key)
                    yield adapters
            yield Static("Replicas here", classes="section-title")
            self._node_replicas = Static(
                "reading the replicas…", id="node-replicas", classes="section-body"
            )
            yield self._node_replicas
            yield Static("Doctor", classes="section-title")
            self._doctor = Static("", id="doctor", classes="section-body")
            yield self._doctor
        yield Footer()

    def on_mount(self) -> None:
        """Show the node from the app's latest snapshot and follow updates."""
        self.title = "llmgw"
        self.sub_title = f"node {self.node_name}"
        self.console_app.fleet_changed.subscribe(self, self.show_fleet)
        fleet = self.console_app.fleet
        if fleet is not None:
            self.show_fleet(fleet)
        self._devices.focus()
        self.action_doctor()
        self._read_replicas()
        self.set_interval(REPLICAS_EVERY_S, self._read_replicas)

    @work(group="node-replicas", exclusive=True, exit_on_error=False, description="Replicas")
    async def _read_replicas(self) -> None:
        """The shards this node runs, each with the path its NCCL took (read from its log)."""
        if not self.is_current:
            return  # a page over this one is shown: no agent is asked for what nobody sees
        try:
            views = await self.console_app.feed.replicas(transports=True)
        except LlmgwError as error:
            self.post_message(NodeShardsRead(error=str(error)))
            return
        self.post_message(NodeShardsRead(shards_on_node(views, self.node_name)))

    def on_node_shards_read(self, read: NodeShardsRead) -> None:
        """Draw the shards this node runs (or why they could not be read)."""
        shown = self._node_replicas
        if read.error is not None:
            shown.update(Content.from_markup("[$error]$sentence[/]", sentence=read.error))
            return
        lines = cast("list[str]", read.found)
        shown.update(Content("\n".join(lines)) if lines else "none")

    def action_doctor(self) -> None:
        """Run the node's doctor again (in a worker: the agent may take seconds)."""
        self._doctor.update("running the doctor…")
        self._run_doctor()

    @work(group="doctor", exclusive=True, exit_on_error=False, description="The doctor")
    async def _run_doctor(self) -> None:
        try:
            checks = await self.console_app.feed.doctor(self.node_name)
        except LlmgwError as error:
            self.post_message(NodeDoctorRead(error=str(error)))
            return
        self.post_message(NodeDoctorRead(checks))

    def on_node_doctor_read(self, read: NodeDoctorRead) -> None:
        """Draw the node's checks (or why the doctor could not run)."""
        doctor = self._doctor
        if read.error is not None:
            doctor.update(Content.from_markup("[$error]$sentence[/]", sentence=read.error))
            return
        doctor.update(doctor_content(cast("list[dict[str, str]]", read.found)))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A doctor that died of an unexpected error says so in its place (the app notifies)."""
        if event.worker.group == "doctor" and event.state == WorkerState.ERROR:
            self._doctor.update(
                Content.from_markup(
                    "[$error]the doctor stopped: $error[/]", error=str(event.worker.error)
                )
            )

    def show_fleet(self, fleet: FleetSummary) -> None:
        """Redraw from a new snapshot, updating rows in place."""
        detail = fleet.details.get(self.node_name)
        summary = self._node_summary
        if detail is None:
            summary.update(f"{self.node_name} is not in the fleet.")
            summary.set_class(True, "-error")
            return
        summary.update(self._summary_text(detail))
        for state in NODE_STATES:
            summary.set_class(detail.summary.state == state, f"-{state}")
        self._show_devices(detail)
        self._show_matrix(detail)
        self._show_adapters(detail)
        for table in self.query(DataTable):
            self.call_after_refresh(redraw_table, table)

    def _summary_text(self, detail: NodeDetail) -> str:
        # Every value comes from a node: escaped, so a `[` in a reason is text, not markup.
        node = detail.summary
        parts = [f"[b]{escape(node.name)}[/b]", escape(node.state)]
        if node.reason:
            parts.append(escape(node.reason))
        parts.append(f"domain {escape(detail.nvlink_domain or 'none')}")
        if detail.fabric_problem:
            parts.append(f"[$warning]{escape(detail.fabric_problem)}[/]")
        parts.append(f"IMEX {escape(detail.imex or 'none')}")
        parts.append(f"fabrics {escape(', '.join(node.fabrics) or 'none')}")
        parts.extend(f"{title} {escape(value)}" for title, value in detail.host)
        return " · ".join(parts)

    def _show_devices(self, detail: NodeDetail) -> None:
        rows: dict[str, dict[str, object]] = {}
        for device in detail.devices:
            rows[device.label] = {
                "label": plain(device.label),
                "class": plain(device.gpu_class),
                "memory": memory_cell(self.app, device.memory_used_mib, device.memory_total_mib),
                "util": plain("-") if device.is_mig else optional(device.utilisation_pct, "%"),
                "temp": optional(device.temperature_c, "°C"),
                "power": optional(None if device.power_w is None else round(device.power_w), " W"),
                "numa": optional(device.numa_node),
                "nic": plain(device.nearest_nic or "-"),
                "fabric": state_cell(self.app, device.fabric) if device.fabric else plain("-"),
            }
        if not rows:
            blank = {key: plain("") for key, _ in DEVICE_COLUMNS}
            why = (
                "no GPU: a CPU node" if detail.summary.cpu_only else "no facts: it has not answered"
            )
            rows["none"] = {**blank, "label": plain("-"), "class": plain(why)}
        sync_rows(self._devices, rows)

    def _show_matrix(self, detail: NodeDetail) -> None:
        matrix = detail.nvlink
        if matrix == self._matrix_shown:
            return
        table = self._nvlink
        table.clear(columns=True)
        table.add_column("", key="row")
        for label in matrix.labels:
            table.add_column(label, key=label)
        for label, row in zip(matrix.labels, matrix.cells, strict=True):
            table.add_row(plain(label), *(link_cell(self.app, kind) for kind in row), key=label)
        self._matrix_shown = matrix

    def _show_adapters(self, detail: NodeDetail) -> None:
        rows: dict[str, dict[str, object]] = {}
        for adapter in detail.adapters:
            key = f"{adapter.name}/{adapter.port or 1}"
            rate = Text("-" if adapter.rate_gbps is None else f"{adapter.rate_gbps:g} Gb/s")
            if adapter.below_rated:
                rate.append(f" of {adapter.rated_gbps:g}")
                rate.stylize(theme_style(self.app, "warning"))
            if adapter.rail_failed:
                # Left out of NCCL_IB_HCA for replicas across the node it failed with.
                rate.append(
                    f"  ✗ rail failed: {adapter.rail_failed}", theme_style(self.app, "error")
                )
            rows[key] = {
                "name": plain(key),
                "state": state_cell(self.app, adapter.state) if adapter.state else plain("-"),
                "rate": rate,
                "layer": plain(adapter.link_layer or "-"),
            }
        sync_rows(self._adapters, rows)

    def action_back(self) -> None:
        """Back to where the page was opened from."""
        self.app.pop_screen()
