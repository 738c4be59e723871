"""Replicas: every replica the nodes run, its shards per node, and what to do with it.

Rows are keyed by replica name and updated in place as the feed is polled;
the shards of the replica under the cursor are listed below. Stop, logs,
bench and ask act on that replica; each runs in a worker. Running gateways
are listed above the table, one line each; `g` opens a gateway's log.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, ClassVar, cast

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.reactive import var
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Sparkline, Static

from llmgw_core.engines.latency import seconds_text
from llmgw_core.errors import LlmgwError
from llmgw_core.gateway.spec import gateway_line
from llmgw_core.serve.view import ReplicaView
from llmgw_core.views.replicas import (
    adapters_line,
    download_bar,
    figures_line,
    load_row,
    replica_row,
    shard_row,
    shard_transport,
)
from llmgw_tui.cells import redraw_table, state_cell
from llmgw_tui.fields import Checked, CheckedInput, prompt_refusal, reason
from llmgw_tui.kept_screen import KeptScreen
from llmgw_tui.messages import OpenLogs, ReplicasRead
from llmgw_tui.textual_hooks import Guarded
from llmgw_tui.theme import theme_style
from llmgw_tui.widgets.footer import SteadyFooter
from llmgw_tui.widgets.header import TitleBar

if TYPE_CHECKING:
    from llmgw_core.serve.loads import ReplicaLoad
    from llmgw_tui.feed import FleetFeed

REPLICA_COLUMNS = (
    ("name", "REPLICA"),
    ("phase", "PHASE"),
    ("engine", "ENGINE"),
    ("way", "WAY"),
    ("endpoint", "ENDPOINT"),
    ("shards", "SHARDS"),
    ("transport", "NCCL"),
    ("load", "RUN/WAIT"),
    ("kv", "KV"),
    ("ttft", "TTFT p99"),
    ("itl", "ITL p99"),
)
"""The replica, then its engine as last read: requests running/waiting, KV cache in use, the
last minute's p99 time to first token and inter-token latency (the p50s and tokens per second
of the replica selected on the line under the table)."""
SHARD_COLUMNS = ("RANK", "NODE", "PHASE", "NCCL", "DOWNLOAD", "GPUS", "WHY")
POLL_S = 1.0
GATEWAY_POLLS = 3
"""Gateways are read every third poll: each read asks every node and every gateway."""
JOB_POLLS = 5
"""Slurm replicas' jobs are read every fifth poll: each read is a command per job on the
cluster's login node, which every user of the site shares."""
LOAD_POLLS = 3
"""The engines' `/metrics` are read every third poll, while the screen is shown: each read is
a request (a TLS handshake) to every ready replica, and a minute's figures move slowly."""

PHASE_COLOURS = {
    "ready": "ready",
    "starting": "connecting",
    "loading": "connecting",
    "unreachable": "unreachable",
    "failed": "unreachable",
    "stopped": "local",
}


class ConfirmStop(Guarded, ModalScreen[bool]):
    """`Stop NAME?` — y stops, n or esc keeps it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Stop it", id="confirm-yes"),
        Binding("n,escape", "answer(False)", "Keep it", id="confirm-no"),
    ]

    def __init__(self, name: str, nodes: str, *, question: str | None = None) -> None:
        super().__init__()
        self._question = question or (
            f"Stop {name}? Its shards on {nodes} end and their cards are freed."
        )

    def compose(self) -> ComposeResult:
        """The question and the two keys."""
        with Vertical(id="confirm-box"):
            yield Static(self._question, markup=False)
            yield Static("y stop · n keep", classes="hint")

    def action_answer(self, stop: bool) -> None:
        """Close with the answer."""
        self.dismiss(stop)


class ReplicaTable(DataTable[object]):
    """The replicas; Enter opens the logs of the one under the cursor."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Logs", show=False, id="replicas-enter"),
    ]


class ReplicasScreen(KeptScreen[None]):
    """Each replica with phase, engine, endpoint and shards per node; stop, logs, bench, ask."""

    BINDING_GROUP_TITLE = "Replicas"
    AUTO_FOCUS = "#replicas"
    """Not Textual's first focusable widget: that is the prompt, hidden until `a`."""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "stop", "Stop", id="replicas-stop"),
        Binding("l", "logs", "Logs", id="replicas-logs"),
        Binding("b", "bench", "Bench", id="replicas-bench"),
        Binding("a", "ask", "Ask", id="replicas-ask"),
        Binding("g", "gateway_logs", "Gateway log", id="replicas-gateway-logs"),
        Binding("k", "keep", "Keep", id="replicas-keep"),
        Binding("escape", "close_ask", "Close", show=False, id="replicas-close"),
    ]

    focus_name: var[str | None] = var(None, init=False, always_update=True)
    """The replica to put the cursor on, now or when it appears (the wizard's): set it to move."""

    def __init__(self) -> None:
        super().__init__()
        self.views: tuple[ReplicaView, ...] = ()
        self.gateways: list[dict[str, Any]] = []
        """The running gateways as the feed last gave them (`gateway_line` draws each)."""
        self._shown: list[str] = []
        self.keeping: str | None = None
        """The service this screen keeps (`k`), None when it keeps none."""
        self.kept_events: list[str] = []
        self._downloads: dict[tuple[str, str], tuple[float, int, float]] = {}
        self.loads: dict[str, ReplicaLoad] = {}
        """Each ready replica's engine as last read (`FleetFeed.replica_loads`)."""
        self.slurm_jobs: dict[str, dict[str, Any]] = {}
        """Each Slurm replica's job as the scheduler last said (`FleetFeed.slurm_jobs`)."""

    def compose(self) -> ComposeResult:
        """Status line, the replicas, the shards of the one selected, the ask field, the answer."""
        yield TitleBar(icon="▦")
        self._replicas_status = Static(
            "reading the replicas…", id="replicas-status", classes="status", markup=False
        )
        yield self._replicas_status
        self._gateways = Static("", id="gateways", markup=False)
        yield self._gateways
        self._keeping = Static("", id="keeping", markup=False)
        yield self._keeping
        table = ReplicaTable(id="replicas", classes="upper", cursor_type="row", zebra_stripes=True)
        self._replicas = table
        for key, label in REPLICA_COLUMNS:
            table.add_column(label, key=key)
        yield table
        self._replica_reason = Static("", id="replica-reason", classes="reason", markup=False)
        yield self._replica_reason
        self._minute = Static("", id="replica-minute", markup=False)
        yield self._minute
        with Horizontal(id="replica-trend-row"):
            self._trend_label = Static("", id="replica-trend-label", markup=False)
            yield self._trend_label
            self._trend = Sparkline([], id="replica-trend")
            yield self._trend
        shards: DataTable[object] = DataTable(id="shards", classes="fill below", cursor_type="none")
        self._shards = shards
        shards.add_columns(*SHARD_COLUMNS)
        yield shards
        self._ask = CheckedInput(
            placeholder="ask the replica: type a prompt, Enter sends",
            id="ask",
            classes="popup",
            validators=[Checked(prompt_refusal)],
        )
        yield self._ask
        self._replica_answer = Static("", id="replica-answer", classes="detail", markup=False)
        yield self._replica_answer
        yield SteadyFooter()

    def on_mount(self) -> None:
        """No blinking cursor; the table has the keys."""
        self.title = "llmgw"
        self.sub_title = "replicas"
        self._ask.cursor_blink = False
        self._replica_answer.display = False
        self._gateways.display = False
        self._keeping.display = False
        self._replicas.focus()

    def on_first_show(self) -> None:
        """Start reading (the first time the screen is shown)."""
        self.poll_replicas()

    def show_replica(self, name: str) -> None:
        """Put the cursor on `name` once it is listed (now, or when it appears)."""
        self.focus_name = name

    def watch_focus_name(self, name: str | None) -> None:
        """The cursor on the replica asked for, if it is listed already."""
        if name is not None and name in self._shown:
            self._replicas.move_cursor(row=self._shown.index(name))

    @work(group="replicas-poll", exclusive=True, exit_on_error=False, description="Replicas")
    async def poll_replicas(self) -> None:
        """Read the replicas every second; a failed read is a red line, and reading goes on."""
        feed = self.console_app.feed
        polls = 0
        while True:
            try:
                views = await feed.replicas(transports=True)
                downloads = await self._read_downloads(feed, views)
                loads = self.loads
                if polls % LOAD_POLLS == 0 and self.is_current:
                    loads = await feed.replica_loads(views)
                jobs = self.slurm_jobs
                if polls % JOB_POLLS == 0 or set(jobs) != set(self._slurm_names(views)):
                    jobs = await feed.slurm_jobs(views)
            except LlmgwError as exc:
                self.post_message(ReplicasRead(error=exc.sentence()))
            else:
                self.post_message(ReplicasRead((views, downloads, loads, jobs)))
            if polls % GATEWAY_POLLS == 0:
                await self._read_gateways(feed)
            polls += 1
            if feed.refresh_s is None:
                return
            await asyncio.sleep(POLL_S)

    @staticmethod
    def _slurm_names(views: tuple[ReplicaView, ...]) -> list[str]:
        """The replicas that are Slurm jobs (a new one is read at once, not at the fifth poll)."""
        return [v.name for v in views if (v.spec.get("slurm") or {}).get("job_id")]

    async def _read_gateways(self, feed: FleetFeed) -> None:
        """One line per running gateway (`gateway_line`); hidden while there is none."""
        try:
            self.gateways = await feed.gateways()
        except LlmgwError as exc:
            self.gateways = [{"name": "?", "error": exc.sentence()}]
        line = self._gateways
        line.update("\n".join(gateway_line(gateway) for gateway in self.gateways))
        line.display = bool(self.gateways)
        self.refresh_bindings()  # `g` shows while a gateway runs

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`g` (a gateway's log) only while a gateway is listed."""
        if action == "gateway_logs":
            return bool(self._gateway_names())
        return True

    def _gateway_names(self) -> list[str]:
        return [str(g["name"]) for g in self.gateways if g.get("name") not in (None, "?")]

    async def action_gateway_logs(self) -> None:
        """The log of the gateway listed above the table; with several, the gateways screen."""
        names = self._gateway_names()
        if not names:
            self.notify("No gateway runs.", severity="warning")
        elif len(names) > 1:
            await self.app.run_action("show_gateways")  # pick one there; `l` opens its log
        else:
            self.post_message(OpenLogs(names[0], gateway=True))

    async def _read_downloads(
        self, feed: FleetFeed, views: tuple[ReplicaView, ...]
    ) -> dict[tuple[str, str], int]:
        found: dict[tuple[str, str], int] = {}
        for view in views:
            for node, fetched in (await feed.downloaded_bytes(view)).items():
                found[(view.name, node)] = fetched
        return found

    def on_replicas_read(self, read: ReplicasRead) -> None:
        """Draw the replicas read (or the sentence why they could not be)."""
        if read.error is not None:
            self._status(read.error, error=True)
            return
        views, downloads, loads, jobs = cast(
            "tuple[tuple[ReplicaView, ...], dict[tuple[str, str], int], "
            "dict[str, ReplicaLoad], dict[str, dict[str, Any]]]",
            read.found,
        )
        self.loads = loads
        self.slurm_jobs = jobs
        self.show(views, downloads)

    def show(
        self, views: tuple[ReplicaView, ...], downloads: dict[tuple[str, str], int] | None = None
    ) -> None:
        """Update rows in place (keyed by name), then the selected replica's shards."""
        self.views = views
        now = time.monotonic()
        for key, fetched in (downloads or {}).items():
            before = self._downloads.get(key)
            rate = 0.0
            if before is not None and now > before[0] and fetched >= before[1]:
                rate = (fetched - before[1]) / (now - before[0])
            self._downloads[key] = (now, fetched, rate)
        ready = sum(v.phase == "ready" for v in views)
        self._status(f"{len(views)} replica{'' if len(views) == 1 else 's'} · {ready} ready")
        table = self._replicas
        names = [v.name for v in views]
        with self.app.batch_update():
            if names != self._shown:
                selected = self.selected()
                table.clear()
                for view in views:
                    table.add_row(*self._cells(view).values(), key=view.name)
                self._shown = names
                keep = self.focus_name if self.focus_name in names else selected
                if keep is not None and keep in names:
                    table.move_cursor(row=names.index(keep))
                self.call_after_refresh(redraw_table, table)
            else:
                for view in views:
                    for column, value in self._cells(view).items():
                        if table.get_cell(view.name, column) != value:
                            table.update_cell(view.name, column, value)
            self._show_shards()

    def _cells(self, view: ReplicaView) -> dict[str, object]:
        row = replica_row(view, self.slurm_jobs.get(view.name))
        load = load_row(self.loads.get(view.name))
        return {
            "name": Text(row.name, style="bold"),
            "phase": self._phase_cell(row.phase),
            "engine": Text(row.engine),
            "way": Text(row.way),
            "endpoint": Text(row.endpoint),
            "shards": Text(row.shards),
            "transport": self._transport_cell(row.transport, bool(view.transport_warnings)),
            "load": Text(load.load),
            "kv": Text(load.kv),
            "ttft": Text(load.ttft),
            "itl": Text(load.itl),
        }

    def _phase_cell(self, phase: str) -> Text:
        cell = state_cell(self.app, PHASE_COLOURS.get(phase, phase))
        cell.plain = phase
        return cell

    def _transport_cell(self, transport: str, warned: bool) -> Text:
        """The transport in red when the core warns about it (TCP between nodes)."""
        if warned:
            return Text(transport, style=theme_style(self.app, "error", bold=True))
        return Text(transport)

    def _show_shards(self) -> None:
        view = self.selected_view()
        shards = self._shards
        reason = self._replica_reason
        shards.clear()
        self._show_trend(view)
        if view is None:
            reason.update("No replica runs. `:serve` brings one up.")
            reason.display = True
            return
        said = [f"{view.name}: {view.reason}"] if view.reason else []
        said += list(view.transport_warnings)
        figures = figures_line(view)
        if figures:
            said.append(figures)
        adapters = adapters_line(view)
        if adapters:
            said.append(adapters)
        said += [f"{view.name}: {warning}" for warning in view.figure_warnings]
        reason.update("\n".join(said))
        reason.display = bool(said)
        for shard in view.shards:
            _, fetched, rate = self._downloads.get((view.name, shard.node), (0.0, 0, 0.0))
            row = shard_row(shard)
            shards.add_row(
                row.rank,
                row.node,
                self._phase_cell(row.phase),
                self._transport_cell(
                    shard_transport(view, shard) or "-", bool(view.transport_warnings)
                ),
                download_bar(fetched, rate) if fetched else "-",
                row.gpus,
                row.why,
            )
        self.call_after_refresh(redraw_table, shards)

    def _show_trend(self, view: ReplicaView | None) -> None:
        """The selected replica's p99 time to first token, each read of the last minute's, as
        a sparkline (hidden until there are two)."""
        load = self.loads.get(view.name) if view is not None else None
        minute = load_row(load).minute
        self._minute.update(minute)
        self._minute.display = bool(minute)
        trend = load.ttft_trend if load is not None else ()
        row = self.query_one("#replica-trend-row")
        row.display = len(trend) >= 2
        if len(trend) >= 2:
            self._trend_label.update(f"TTFT p99 {seconds_text(trend[-1])} ")
            self._trend.data = list(trend)

    def _status(self, sentence: str, *, error: bool = False) -> None:
        status = self._replicas_status
        status.update(sentence)
        status.set_class(error, "-error")

    def selected(self) -> str | None:
        """The name of the replica under the cursor."""
        table = self._replicas
        if not self._shown or table.cursor_row >= len(self._shown):
            return None
        return self._shown[table.cursor_row]

    def selected_view(self) -> ReplicaView | None:
        """The replica under the cursor."""
        name = self.selected()
        return next((v for v in self.views if v.name == name), None)

    @on(DataTable.RowHighlighted, "#replicas")
    def _row_moved(self) -> None:
        self._show_shards()

    @on(DataTable.RowSelected, "#replicas")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_logs()

    def _need_view(self) -> ReplicaView | None:
        view = self.selected_view()
        if view is None:
            self.notify("No replica selected.", severity="warning")
        return view

    def action_logs(self) -> None:
        """Every rank's log of the selected replica, merged."""
        view = self._need_view()
        if view is not None:
            self.post_message(OpenLogs(view.name))

    def action_stop(self) -> None:
        """Ask, then stop the selected replica."""
        view = self._need_view()
        if view is None:
            return
        nodes = ", ".join(sorted({s.node for s in view.shards})) or "no node"

        def answered(stop: bool | None) -> None:
            if stop:
                self.stop_replica(view.name)

        self.app.push_screen(ConfirmStop(view.name, nodes), answered)

    @work(group="replica-action", exit_on_error=False, description="Stopping")
    async def stop_replica(self, name: str) -> None:
        """Stop every shard of `name`; say what was stopped and what could not be reached."""
        feed = self.console_app.feed
        try:
            result = await feed.stop_replica(name)
        except LlmgwError as exc:
            self.notify(exc.sentence(), title="Stop", severity="error")
            return
        sentence = f"{name}: {len(result.get('stopped', []))} shards stopped."
        if result.get("unreached"):
            sentence += f" Not reached: {', '.join(result['unreached'])}."
        self.notify(sentence, title="Stop")

    def action_keep(self) -> None:
        """Keep the selected replica's service (heal and scale it) while shown; `k` again stops."""
        if self.keeping is not None:
            self.workers.cancel_group(self, "replicas-keep")
            return
        view = self._need_view()
        if view is None:
            return
        if view.service is None:
            self.notify(
                f"{view.name} was served by hand, not by a service: nothing to keep "
                "(save it as a service from the wizard's Confirm page, ctrl+s)",
                title="Keep",
                severity="warning",
            )
            return
        self.keeping, self.kept_events = view.service, []
        self._show_keeping()
        self.keep(view.service)

    def _show_keeping(self) -> None:
        line = self._keeping
        line.display = self.keeping is not None
        if self.keeping is not None:
            last = f" · {self.kept_events[-1]}" if self.kept_events else ""
            count = len(self.kept_events)
            line.update(f"keeping service {self.keeping} (k stops) · {count} event(s){last}")

    def _kept_event(self, line: str) -> None:
        self.kept_events.append(line.split(": ", 1)[-1])
        self._show_keeping()

    @work(group="replicas-keep", exclusive=True, exit_on_error=False, description="Keeping")
    async def keep(self, service: str) -> None:
        """Run the keeper until `k` again (or the screen is dismissed); say how it ended."""
        feed = self.console_app.feed
        try:
            result = await feed.keep_service(service, self._kept_event)
        except LlmgwError as exc:
            self.notify(exc.sentence(), title="Keep", severity="error", timeout=15)
        else:
            if result.get("failed"):
                self.notify(result["failed"], title="Keep", severity="error", timeout=15)
            else:
                self.notify(
                    f"stopped keeping {service} after {len(result.get('events') or [])} event(s)",
                    title="Keep",
                )
        finally:
            self.keeping = None
            self._show_keeping()

    def action_bench(self) -> None:
        """Measure tokens a second of the selected replica."""
        view = self._need_view()
        if view is not None:
            self._answer(f"benchmarking {view.name}…")
            self.bench(view)

    @work(group="replica-action", exit_on_error=False, description="Bench")
    async def bench(self, view: ReplicaView) -> None:
        """Sixteen completions, four at a time; the figures in the answer line."""
        feed = self.console_app.feed
        try:
            figures = await feed.bench(view)
        except LlmgwError as exc:
            self._answer(exc.sentence(), error=True)
            return
        latency = figures.get("latency_s") or {}
        self._answer(
            f"{view.name}: {figures.get('tokens_per_s')} tokens/s over {figures.get('requests')} "
            f"requests, {figures.get('concurrency')} at a time · latency p50 {latency.get('p50')} s "
            f"p90 {latency.get('p90')} s"
        )

    def action_ask(self) -> None:
        """Type a prompt for the selected replica."""
        if self._need_view() is None:
            return
        field = self._ask
        field.add_class("-visible")
        field.focus()

    def action_close_ask(self) -> None:
        """Hide the prompt field."""
        field = self._ask
        field.remove_class("-visible")
        self._replicas.focus()

    @on(Input.Submitted, "#ask")
    def _ask_submitted(self, event: Input.Submitted) -> None:
        view = self.selected_view()
        prompt = event.value.strip()
        refused = reason(event.input)
        if refused is not None:
            self._answer(refused, error=True)
            return
        if view is None or not prompt:
            return
        self._answer(f"asking {view.name}…")
        self.ask(view, prompt)

    @work(group="replica-action", exit_on_error=False, description="Ask")
    async def ask(self, view: ReplicaView, prompt: str) -> None:
        """Send one prompt; the answer in the answer line."""
        feed = self.console_app.feed
        try:
            text = await feed.ask(view, prompt)
        except LlmgwError as exc:
            self._answer(exc.sentence(), error=True)
            return
        self._answer(f"{view.name}: {text.strip()}")

    def _answer(self, sentence: str, *, error: bool = False) -> None:
        answer = self._replica_answer
        answer.display = True
        answer.update(sentence)
        answer.set_class(error, "-error")
