"""The fleet: every node at a glance, refreshed in place as snapshots arrive; under the
nodes, each Slurm cluster of the inventory with its partition's nodes and the jobs on them."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import var
from textual.timer import Timer
from textual.widgets import DataTable, Input, Static

from llmgw_tui.cells import classes_cell, plain, redraw_table, state_cell
from llmgw_tui.fields import Checked, CheckedInput, filter_refusal, reason
from llmgw_tui.heap import freeze_long_lived
from llmgw_tui.kept_screen import KeptScreen
from llmgw_tui.messages import OpenNode
from llmgw_tui.theme import theme_style
from llmgw_tui.widgets.footer import SteadyFooter
from llmgw_tui.widgets.header import TitleBar
from llmgw_tui.widgets.table import SteadyTable

if TYPE_CHECKING:  # the rows' types: loaded with the first snapshot, not for the first frame
    from llmgw_core.views.clusters import ClusterSummary
    from llmgw_core.views.fleet import FleetSummary, NodeSummary

FILTER_AFTER_TYPING_ROWS = 500
"""Above this many nodes the filter applies when typing pauses, not at every key."""
FILTER_PAUSE_S = 0.25
FILTER_PLACEHOLDER = "filter nodes (name, class, state, fabric, domain)"
CLUSTERS_EVERY_S = 10.0
"""Seconds between readings of the Slurm clusters (each is a few commands on a login node,
which a site shares with every user: not at the nodes' pace)."""
ROWS_PER_FRAME = 256
"""Rows added per frame when the table is rebuilt (keys are handled between frames); a
poll's changed rows are updated a quarter of that per frame (an update costs more)."""

COLUMNS = (
    ("node", "NODE"),
    ("state", "STATE"),
    ("classes", "CARDS FREE/TOTAL"),
    ("fabrics", "FABRICS"),
    ("domain", "NVLINK DOMAIN"),
    ("shards", "SHARDS"),
)


def matches(node: NodeSummary, needle: str) -> bool:
    """Whether a node matches a `/` filter: any of its words contains the text."""
    if not needle:
        return True
    words = [node.name, node.state, node.nvlink_domain or "", *node.fabrics]
    words += [c.gpu_class for c in node.classes]
    lowered = needle.lower()
    return any(lowered in word.lower() for word in words)


class NodeTable(SteadyTable):
    """The fleet's rows; Enter opens the node under the cursor (and says so in the help)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Node page", id="fleet-node-page"),
    ]


class FleetScreen(KeptScreen[None]):
    """Nodes with state, classes and free/total cards, fabrics, NVLink domain, shards."""

    BINDING_GROUP_TITLE = "Fleet"

    needle: var[str] = var("", init=False)
    """The `/` filter the rows are shown through (a refused value filters nothing)."""
    AUTO_FOCUS = "#nodes"
    """The table has the keys from the first frame (focusing it later rebuilt the footer twice)."""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter", key_display="/", id="fleet-filter"),
        Binding("r", "app.refresh_fleet", "Refresh", id="fleet-refresh"),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="fleet-clear"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._fleet: FleetSummary | None = None
        self._shown: list[str] = []
        self._drawn: dict[str, tuple[NodeSummary, dict[str, object]]] = {}
        """Per node: the summary its row was drawn from, and that row's cells."""
        self._filter_timer: Timer | None = None
        self._build_generation = 0
        self._building: tuple[list[str], str | None] | None = None
        """The rows being added a chunk per frame, and the node to put the cursor on."""
        self._texts: dict[str, str] = {}
        """Per widget id: the text it shows now (a line is updated only when it changes)."""

    def compose(self) -> ComposeResult:
        """Header, a status line, the table and the footer (the filter is mounted on `/`)."""
        yield TitleBar(icon="▦")
        self._fleet_status = Static(
            "connecting to the fleet…", id="fleet-status", classes="status", markup=False
        )
        yield self._fleet_status
        table = NodeTable(id="nodes", classes="fill", cursor_type="row", zebra_stripes=True)
        self._node_table = table
        for key, label in COLUMNS:
            table.add_column(Text(label), key=key)  # a str is parsed as markup (and emoji)
        yield table
        self._fleet_reasons = Static("", id="fleet-reasons", classes="warnings", markup=False)
        yield self._fleet_reasons
        self._clusters_text = Static("", id="fleet-clusters", markup=False)
        self._clusters_text.display = False
        yield self._clusters_text
        yield SteadyFooter()

    def on_mount(self) -> None:
        """Show the fleet the app already has, and follow its updates."""
        self.title = "llmgw"
        self.sub_title = "fleet"
        self.console_app.fleet_changed.subscribe(self, self.show_fleet)
        self.console_app.fleet_failed.subscribe(self, self.show_failure)
        fleet = self.console_app.fleet
        if fleet is not None:
            self.show_fleet(fleet)
        self.poll_clusters()

    @work(group="fleet-clusters", exclusive=True, exit_on_error=False, description="Clusters")
    async def poll_clusters(self) -> None:
        """Read the inventory's Slurm clusters now and every `CLUSTERS_EVERY_S` after each
        reading ends (never two at once); an inventory without clusters shows nothing."""
        feed = self.console_app.feed
        while True:
            clusters = await feed.clusters()
            self.show_clusters(clusters)
            if feed.refresh_s is None:
                return
            # Until the fleet is connected the feed has no clusters to read: ask again soon.
            connected = self.console_app.fleet is not None
            await asyncio.sleep(CLUSTERS_EVERY_S if connected else 1.0)

    def show_clusters(self, clusters: tuple[ClusterSummary, ...]) -> None:
        """A heading per cluster and a line per node of its partition; a cluster that could
        not be read is one line in the error colour, with its sentence."""
        from llmgw_core.views.clusters import node_line_text

        text = Text()
        for cluster in clusters:
            if text:
                text.append("\n")
            if cluster.error is not None:
                text.append(
                    f"{cluster.heading}: {cluster.error}", style=theme_style(self.app, "error")
                )
                continue
            text.append(cluster.heading, style="bold")
            for line in cluster.nodes:
                text.append("\n" + node_line_text(line))
        key = "fleet-clusters"
        if self._texts.get(key) != text.markup:
            self._texts[key] = text.markup
            self._clusters_text.update(text)
        self._clusters_text.display = bool(clusters)

    def show_fleet(self, fleet: FleetSummary) -> None:
        """Update the rows that changed; add and remove rows by node name; keep the cursor."""
        from llmgw_core.views.fleet import fleet_totals

        self._fleet = fleet
        totals = fleet_totals(fleet)
        status = self._fleet_status
        status.remove_class("-error")
        self._update_if_changed(
            status,
            f"{totals.nodes} nodes · {totals.ready} ready · "
            f"{totals.gpus_free}/{totals.gpus_total} GPUs free · "
            f"{totals.nvlink_domains} NVLink domain{'' if totals.nvlink_domains == 1 else 's'}",
        )
        reasons = self._fleet_reasons
        self._update_if_changed(
            reasons,
            "\n".join(
                f"{name} {state}: {reason or 'no reason given'}"
                for name, state, reason in totals.not_ready
            ),
        )
        reasons.display = bool(totals.not_ready)
        self._sync_rows()

    def _update_if_changed(self, widget: Static, text: str) -> None:
        """A poll that changes nothing draws nothing (a hundred reasons re-laid out took 0.3 s)."""
        if self._texts.get(widget.id or "") != text:
            self._texts[widget.id or ""] = text
            widget.update(text)

    def show_failure(self, sentence: str) -> None:
        """Say in red why the fleet cannot be read; the last rows stay as they were."""
        status = self._fleet_status
        self._update_if_changed(status, sentence)
        status.add_class("-error")

    def _cells(self, node: NodeSummary) -> dict[str, object]:
        """The row's cells, drawn again only when the node's summary changed."""
        drawn = self._drawn.get(node.name)
        if drawn is not None and (drawn[0] is node or drawn[0] == node):
            return drawn[1]
        cells = self._new_cells(node)
        self._drawn[node.name] = (node, cells)
        return cells

    def _new_cells(self, node: NodeSummary) -> dict[str, object]:
        return {
            "node": Text(node.name, style="bold"),
            "state": state_cell(self.app, node.state),
            "classes": self._offer(node),
            "fabrics": plain(", ".join(node.fabrics) or "-"),
            "domain": plain(node.nvlink_domain or "-"),
            "shards": plain(node.running_shards),
        }

    def _offer(self, node: NodeSummary) -> object:
        if node.cpu_only:
            return plain(f"CPU, {node.ram_gib} GiB RAM" if node.ram_gib else "CPU")
        return classes_cell(self.app, node.classes) if node.classes else plain("-")

    def _sync_rows(self) -> None:
        if self._fleet is None:
            return
        table = self._node_table
        wanted = [n for n in self._fleet.nodes if matches(n, self.needle)]
        wanted_names = [n.name for n in wanted]
        if wanted_names != self._shown:
            # The set of rows changed (a filter, a node added): rebuild in name order.
            self._rebuild(table, wanted)
            return
        self._build_generation += 1
        generation = self._build_generation
        changed = [n for n in wanted if not self._drawn_from(n)]  # at 2,048 rows, a few

        def update_chunk(start: int) -> None:
            if generation != self._build_generation:
                return  # a newer poll or filter redraws what is still not drawn
            with self.app.batch_update():
                for node in changed[start : start + ROWS_PER_FRAME // 4]:
                    before = self._drawn.get(node.name)
                    cells = self._cells(node)
                    for column, value in cells.items():
                        if before is None or before[1].get(column) != value:
                            table.update_cell(node.name, column, value)
            if start + ROWS_PER_FRAME // 4 < len(changed):
                self.call_after_refresh(update_chunk, start + ROWS_PER_FRAME // 4)
            else:
                table.warm(n.name for n in changed)  # their new cells, before they are shown

        update_chunk(0)

    def _drawn_from(self, node: NodeSummary) -> bool:
        """Whether the node's row was drawn from this very summary (or an equal one)."""
        drawn = self._drawn.get(node.name)
        return drawn is not None and (drawn[0] is node or drawn[0] == node)

    def _rebuild(self, table: NodeTable, wanted: list[NodeSummary]) -> None:
        """Draw `wanted` from scratch, `ROWS_PER_FRAME` rows at a time.

        Adding 2,048 rows at once held the keys for half a second; a chunk per
        frame lets each key through between chunks. Until the last chunk is in,
        `_shown` is not `wanted`, so a poll meanwhile starts the build again.
        """
        selected = self.selected_node() if self._building is None else self._building[1]
        self._build_generation += 1
        generation = self._build_generation
        self._building = ([n.name for n in wanted], selected)
        self._shown = []
        table.clear()

        def add_chunk(start: int) -> None:
            if generation != self._build_generation:
                return  # a newer build (a poll, another filter) took over
            end = min(start + ROWS_PER_FRAME, len(wanted))
            with self.app.batch_update():
                for node in wanted[start:end]:
                    table.add_row(
                        *self._cells(node).values(),
                        key=node.name,
                        height=max(1, len(node.classes)),
                    )
                    if node.name == selected:
                        table.move_cursor(row=table.row_count - 1)
            if end < len(wanted):
                self.call_after_refresh(add_chunk, end)
                return
            self._shown = [n.name for n in wanted]
            self._building = None
            # Rows drawn before the table measured its new column widths stay
            # cached at the old widths (textual 8.2.8): redraw once measured.
            self.call_after_refresh(redraw_table, table)
            self.call_after_refresh(table.warm_all)
            # The rows drawn live as long as the console: keep them (and every
            # module and widget) out of later full garbage collections.
            self.call_after_refresh(freeze_long_lived)

        add_chunk(0)

    def selected_node(self) -> str | None:
        """The node under the cursor, if any."""
        table = self._node_table
        names = self._building[0] if self._building is not None else self._shown
        if table.cursor_row >= min(len(names), table.row_count):
            return None
        return names[table.cursor_row]

    @on(DataTable.RowSelected, "#nodes")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open_selected()

    def action_open_selected(self) -> None:
        """Open the page of the node under the cursor."""
        name = self.selected_node()
        if name is not None:
            self.post_message(OpenNode(name))

    def _filter_field(self) -> Input | None:
        """The filter, once `/` has mounted it."""
        found = self.query("#filter")
        return found.first(Input) if found else None

    async def prepare(self) -> None:
        """Mount the filter, hidden, while the console is idle (the first `/` then only shows it).

        The first input of the console brings Textual's input styles, and the
        whole stylesheet is parsed again: about 0.1 s that the first `/` waited.
        """
        await self._mounted_filter()

    async def _mounted_filter(self) -> Input:
        field = self._filter_field()
        if field is None:
            field = CheckedInput(
                placeholder=FILTER_PLACEHOLDER,
                id="filter",
                classes="popup",
                validators=[Checked(filter_refusal)],
            )
            field.cursor_blink = False
            await self.mount(field, before="#nodes")
        return field

    async def action_filter(self) -> None:
        """Show the filter and type into it (mounted the first time: the first frame has none)."""
        field = await self._mounted_filter()
        field.add_class("-visible")
        field.focus()

    def watch_needle(self) -> None:
        """Show the rows the filter keeps."""
        self._sync_rows()

    def _apply_filter(self) -> None:
        field = self._filter_field()
        self.needle = field.value.strip() if field is not None and reason(field) is None else ""

    @on(Input.Changed, "#filter")
    def _filter_changed(self) -> None:
        if self._filter_timer is not None:
            self._filter_timer.stop()
            self._filter_timer = None
        if self._fleet is not None and len(self._fleet.nodes) > FILTER_AFTER_TYPING_ROWS:
            # Rebuilding thousands of rows per key would make typing lag: wait for a pause.
            self._filter_timer = self.set_timer(FILTER_PAUSE_S, self._apply_filter)
        else:
            self._apply_filter()

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        if self._filter_timer is not None:
            self._filter_timer.stop()
            self._filter_timer = None
            self._apply_filter()
        self._node_table.focus()

    def action_clear_filter(self) -> None:
        """Empty and hide the filter."""
        field = self._filter_field()
        if field is not None:
            field.value = ""
            field.remove_class("-visible")
        self._node_table.focus()
