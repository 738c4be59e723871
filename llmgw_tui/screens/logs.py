"""Logs: one shard's engine output, every rank merged, or a gateway's front, followed live.

A worker reads the feed's batches into `LogLines.pending`; a timer flushes
them into Textual's `Log` in one `write_lines` (never one write per line).
Scrolled up, new lines wait below and a badge counts them. NCCL falling
back to `NET/Socket` turns on a loud banner.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Input, Log, Static

from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.fabric.paths import NvlinkMatrix
from llmgw_core.serve.view import ReplicaView
from llmgw_tui.fields import Checked, CheckedInput, filter_refusal, reason, save_path_refusal
from llmgw_tui.log_lines import LogLines, ShowOptions, shown
from llmgw_tui.textual_hooks import Guarded
from llmgw_tui.widgets.header import TitleBar

FLUSH_HZ = 15
SHOWN_LINES = 50_000
"""Lines the view holds; older ones scroll out of it (they stay kept for filters and saves)."""


class LogsScreen(Guarded, Screen[None]):
    """The log of replica `name` (one rank's shard, or every rank merged), or of gateway `name`."""

    BINDING_GROUP_TITLE = "Logs"
    AUTO_FOCUS = "#log"
    """Not Textual's first focusable widget: that is the filter, hidden until `/`."""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f", "toggle_follow", "Follow", id="logs-follow"),
        Binding("slash", "filter", "Filter", key_display="/", id="logs-filter"),
        Binding("W", "toggle_wrap", "Wrap", key_display="W", id="logs-wrap"),
        Binding("t", "toggle_timestamps", "Times", id="logs-times"),
        Binding("w", "save", "Save", id="logs-save"),
        Binding("end", "jump_end", "End", id="logs-end"),
        Binding("escape", "back", "Back", id="logs-back"),
    ]

    def __init__(self, name: str, rank: int | None = None, *, gateway: bool = False) -> None:
        super().__init__()
        self.replica = name
        """The replica's name, or the gateway's when `gateway`."""
        self.rank = rank
        self.gateway = gateway
        """Whether `replica` names a gateway (its front's one log, no ranks)."""
        self.lines = LogLines()
        self.following = True
        self.new_below = 0
        self.options = ShowOptions()
        self.stream_ended: str | None = None
        self.node_count: int | None = None
        self.topology: NvlinkMatrix | None = None
        """The shown shards' card-to-card matrix, for the path NCCL took inside a node."""
        """Nodes the replica spans (NCCL over sockets matters only across nodes)."""

    def compose(self) -> ComposeResult:
        """Status line, the NCCL banner, filter and save fields, the log, the badge."""
        yield TitleBar(icon="▦")
        self._logs_status = Static("", id="logs-status", classes="status", markup=False)
        yield self._logs_status
        self._nccl_banner = Static("", id="nccl-banner", classes="banner", markup=False)
        yield self._nccl_banner
        self._logs_filter_input = CheckedInput(
            placeholder="filter lines (text, case ignored)",
            id="logs-filter-input",
            classes="popup",
            validators=[Checked(filter_refusal)],
        )
        yield self._logs_filter_input
        self._logs_save_input = CheckedInput(
            placeholder="save to file: path",
            id="logs-save-input",
            classes="popup",
            validators=[Checked(save_path_refusal)],
        )
        yield self._logs_save_input
        self._log = Log(id="log", classes="fill", max_lines=SHOWN_LINES, auto_scroll=True)
        yield self._log
        self._new_lines = Static("", id="new-lines", classes="new-lines", markup=False)
        yield self._new_lines
        yield Footer()

    def on_mount(self) -> None:
        """Start reading, and flush on a timer."""
        self.title = "llmgw"
        self.sub_title = f"logs {self._target()}" + (
            f" r{self.rank}" if self.rank is not None else ""
        )
        for field in self.query(Input):
            field.cursor_blink = False
        self._nccl_banner.display = False
        self._new_lines.display = False
        self._show_status()
        self.set_interval(1 / FLUSH_HZ, self.flush)
        self._log.focus()
        self.read_logs()

    @work(group="logs", exclusive=True, exit_on_error=False, description="Reading the logs")
    async def read_logs(self) -> None:
        """Find the replica or gateway, then follow its shards until they end or the view closes."""
        feed = self.console_app.feed
        if self.gateway:
            await self._read_gateway_log(feed)
            return
        try:
            views = await feed.replicas()
            view = next((v for v in views if v.name == self.replica), None)
            if view is None:
                names = ", ".join(v.name for v in views) or "none"
                raise BadInput(
                    f"no replica is named {self.replica!r}", f"the replicas are: {names}"
                )
            self.node_count = len(view.spec.get("placement", {}).get("nodes", [])) or None
            self.topology = self._topology(view)
            async for batch in feed.follow_logs(view, self.rank):
                self.lines.add(batch, time.time())
        except LlmgwError as exc:
            self.stream_ended = exc.sentence()
            self.notify(exc.sentence(), title="Logs", severity="error")
        else:
            self.stream_ended = "the shards ended; no more lines"
        self._show_status()

    def _topology(self, view: ReplicaView) -> NvlinkMatrix | None:
        """The card-to-card matrix of the shown shards' nodes (the app's last snapshot),
        when they share one."""
        from llmgw_core.serve.transport import node_topology

        fleet = self.console_app.fleet
        if fleet is None or fleet.fleet_state is None:
            return None
        nodes = [s.node for s in view.shards if self.rank is None or s.rank == self.rank]
        known = node_topology(fleet.fleet_state, nodes)
        found = [known.get(node) for node in nodes]
        return found[0] if found and all(f == found[0] for f in found) else None

    async def _read_gateway_log(self, feed: Any) -> None:
        """Follow the gateway's log through the core's reader (the `logs` step's)."""
        try:
            async for batch in feed.follow_gateway_logs(self.replica):
                self.lines.add(batch, time.time())
        except LlmgwError as exc:
            self.stream_ended = exc.sentence()
            self.notify(exc.sentence(), title="Logs", severity="error")
        else:
            self.stream_ended = "the gateway ended; no more lines"
        self._show_status()

    def _target(self) -> str:
        return f"gateway {self.replica}" if self.gateway else self.replica

    def flush(self) -> None:
        """Draw what arrived since the last flush in one write."""
        log = self._log
        if self.lines.pending:
            batch = self.lines.take()
            at_end = log.is_vertical_scroll_end or log.max_scroll_y == 0
            drawn = shown(batch, self.options)
            if drawn:
                log.write_lines(drawn, scroll_end=self.following and at_end)
                if not (self.following and at_end):
                    self.new_below += len(drawn)
            self._show_banner()
            self._show_status()
        elif self.new_below and log.is_vertical_scroll_end:
            self.new_below = 0
        self._show_badge()

    def _show_badge(self) -> None:
        badge = self._new_lines
        badge.display = self.new_below > 0
        if self.new_below:
            badge.update(f"↓ {self.new_below} new lines — End to jump")

    def _show_banner(self) -> None:
        banner = self._nccl_banner
        if self.gateway:  # a gateway speaks no NCCL
            return
        said = self.lines.socket_fallback(self.replica, self.node_count)
        if said and not banner.display:
            banner.update(f"NCCL SAYS NET/Socket: TRAFFIC BETWEEN NODES GOES OVER TCP. {said}")
            banner.display = True
        said = self.lines.shm_on_nvlink(self.replica, self.topology)
        if said and not banner.display:
            banner.update(f"NCCL SAYS SHM: NVLINK CARDS TALK THROUGH HOST MEMORY. {said}")
            banner.display = True

    def _show_status(self) -> None:
        if self.gateway:
            first = f"gateway {self.replica} · its front"
        else:
            ranks = f"rank {self.rank}" if self.rank is not None else "every rank"
            first = f"{self.replica} · {ranks}"
        parts = [
            first,
            f"{self.lines.seen} lines",
            "following" if self.following else "paused",
        ]
        if self.options.needle:
            parts.append(f"filter {self.options.needle!r}")
        if self.options.wrap_width:
            parts.append("wrap")
        if self.options.timestamps:
            parts.append("times")
        label = self.lines.label(self.node_count, self.topology)
        if label:
            parts.append(f"NCCL {label}")
        if self.stream_ended:
            parts.append(self.stream_ended)
        self._logs_status.update(" · ".join(parts))

    def _redraw(self) -> None:
        """Draw every kept line again under the current options."""
        log = self._log
        log.clear()
        log.write_lines(shown(self.lines.kept, self.options), scroll_end=True)
        self.new_below = 0
        self._show_badge()
        self._show_status()

    def action_toggle_follow(self) -> None:
        """Follow new lines, or hold the view where it is."""
        self.following = not self.following
        log = self._log
        log.auto_scroll = self.following
        if self.following:
            self.action_jump_end()
        self._show_status()

    def action_jump_end(self) -> None:
        """Scroll to the last line; the badge goes."""
        self._log.scroll_end(animate=False)
        self.new_below = 0
        self._show_badge()

    def action_toggle_wrap(self) -> None:
        """Wrap long lines at the view's width, or not."""
        width = max(20, self._log.scrollable_content_region.width - 1)
        wrap = None if self.options.wrap_width else width
        self.options = ShowOptions(self.options.needle, wrap, self.options.timestamps)
        self._redraw()

    def action_toggle_timestamps(self) -> None:
        """Show each line's arrival time, or not."""
        self.options = ShowOptions(
            self.options.needle, self.options.wrap_width, not self.options.timestamps
        )
        self._redraw()

    def action_filter(self) -> None:
        """Type a filter; lines without it are hidden."""
        field = self._logs_filter_input
        field.add_class("-visible")
        field.focus()

    @on(Input.Changed, "#logs-filter-input")
    def _filter_changed(self, event: Input.Changed) -> None:
        if reason(event.input) is not None:
            return  # said on the field's border; the lines stay as last filtered
        self.options = ShowOptions(
            event.value.strip(), self.options.wrap_width, self.options.timestamps
        )
        self._redraw()

    @on(Input.Submitted, "#logs-filter-input")
    def _filter_done(self) -> None:
        self._log.focus()

    def action_save(self) -> None:
        """Ask for a path to save the lines shown (filtered, without wrap) to."""
        field = self._logs_save_input
        if not field.value:
            field.value = f"{self._target().replace(' ', '-')}.log"
        field.add_class("-visible")
        field.focus()

    @on(Input.Submitted, "#logs-save-input")
    def _save_to(self, event: Input.Submitted) -> None:
        field = event.input
        refused = reason(field)
        if refused is not None:
            self.notify(refused, title="Logs", severity="error")
            return
        path = Path(event.value.strip()).expanduser()
        options = ShowOptions(self.options.needle, None, self.options.timestamps)
        lines = shown(self.lines.kept, options)
        try:
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        except OSError as exc:
            self.notify(f"Cannot write {path}: {exc.strerror or exc}.", severity="error")
            return
        field.remove_class("-visible")
        self._log.focus()
        self.notify(f"{len(lines)} lines saved to {path}.", title="Logs")

    def action_back(self) -> None:
        """Close an open field, else leave the logs."""
        for field in self.query(Input):
            if field.has_class("-visible"):
                if field.id == "logs-filter-input":
                    field.value = ""
                field.remove_class("-visible")
                self._log.focus()
                return
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()
