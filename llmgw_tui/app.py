"""The console App: top-level screens as modes, global keys, and the fleet poller.

The app owns one thing: the latest fleet snapshot, polled from a feed in a
worker that never overlaps itself, and published to every screen through the
`fleet_changed` signal. Screens draw it; nothing here computes a figure.
With `--metrics-port` a second worker hands the feed's latest metrics
snapshot to a Prometheus endpoint (`llmgw_core.metrics`).

Screens reach the app only through `llmgw_tui.contract.ConsoleApp` (no
module under `llmgw_tui` imports this one but the entry points that build
the app); how the modes' screens are prepared and shown is
`llmgw_tui.modes`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar

from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.command import Provider
from textual.screen import Screen
from textual.signal import Signal
from textual.worker import Worker, WorkerState

from llmgw_core.errors import LlmgwError
from llmgw_tui.guard import ConsoleGuard, where_of
from llmgw_tui.kept_screen import KeptScreen
from llmgw_tui.messages import OpenLogs, OpenNode, OpenReplica
from llmgw_tui.modes import SCREEN_MODULES, ModesApp, lazy_mode_screen
from llmgw_tui.screens.fleet import FleetScreen
from llmgw_tui.textual_hooks import GuardedApp
from llmgw_tui.theme import (
    LLMGW_THEME,
    AnimationLevel,
    animation_level_from_env,
    use_theme_before_start,
)

if TYPE_CHECKING:
    from textual.actions import ActionParseResult
    from textual.dom import DOMNode

    from llmgw_core.views.fleet import FleetSummary
    from llmgw_tui.commands import ParsedCommand
    from llmgw_tui.feed import FleetFeed

METRICS_IDLE_S = 2.0
"""How often a fixed feed (no polling) hands the metrics a snapshot again."""


# The first frame is the fleet's: the other screens' modules are imported as
# `llmgw_tui.modes` says, the palette's commands when it first opens, and the
# live feed by `run_app`.
def _console_commands() -> type[Provider]:
    from llmgw_tui.commands import ConsoleCommands

    return ConsoleCommands


class LlmgwApp(GuardedApp, ModesApp[int]):
    """llmgw's console over one fleet feed."""

    CSS_PATH: ClassVar[list[str | PurePath]] = ["styles/app.tcss"]
    TITLE = "llmgw"
    MODES: ClassVar[dict[str, str | Callable[[], Screen[Any]]]] = {
        "fleet": FleetScreen,
        **{mode: lazy_mode_screen(mode) for mode in SCREEN_MODULES},
    }
    DEFAULT_MODE = "fleet"
    COMMANDS = App.COMMANDS | {_console_commands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help", key_display="?", id="help"),
        Binding("colon", "command_mode", "Command", key_display=":", id="command-mode"),
        Binding("1", "show_fleet", "Fleet", id="show-fleet"),
        Binding("2", "show_racks", "Racks", id="show-racks"),
        Binding("3", "show_plan", "Plan", id="show-plan"),
        Binding("4", "show_replicas", "Replicas", id="show-replicas"),
        Binding("5", "show_serve", "Serve", id="show-serve"),
        Binding("6", "show_gateways", "Gateways", id="show-gateways"),
        Binding("ctrl+p", "command_palette", "Palette", show=False, id="palette"),
        Binding("q", "quit", "Quit", id="quit"),
    ]

    def __init__(
        self,
        feed: FleetFeed,
        *,
        animation: AnimationLevel | None = None,
        metrics_port: int | None = None,
        metrics_host: str | None = None,
    ) -> None:
        super().__init__()
        self.feed = feed
        """Where fleet snapshots come from."""
        self.metrics_port = metrics_port
        """Where Prometheus scrapes the console (None: no endpoint)."""
        self.metrics_host = metrics_host
        self.metrics_url: str | None = None
        """The endpoint's URL once it answers."""
        self.fleet: FleetSummary | None = None
        """The latest snapshot, None until the first arrives."""
        self.fleet_changed: Signal[FleetSummary] = Signal(self, "fleet-changed")
        """Published with each new snapshot."""
        self.fleet_failed: Signal[str] = Signal(self, "fleet-failed")
        """Published with the sentence when the fleet cannot be read."""
        self.animation_level = animation or animation_level_from_env()
        self.guard = ConsoleGuard(self)
        """What escapes a handler, action, timer or worker becomes a red line here."""
        use_theme_before_start(self, LLMGW_THEME)

    async def run_action(
        self,
        action: str | ActionParseResult,
        default_namespace: DOMNode | None = None,
        namespaces: Mapping[str, DOMNode] | None = None,
    ) -> bool:
        """Run an action (a key, the palette, a `:` command); what it raises is a red line."""
        try:
            return await super().run_action(action, default_namespace, namespaces)
        except Exception as error:
            self.guard.catch(error, where_of(self.screen))
            return True

    def on_mount(self) -> None:
        """Start polling the fleet (and exporting metrics, when asked)."""
        self.poll_fleet()
        if self.metrics_port is not None:
            self.export_metrics()

    async def on_unmount(self) -> None:
        """Close the fleet (and the demo fleet's servers) before the loop ends."""
        self.stop_preparing_screens()
        await self.feed.close()

    @work(group="fleet-poll", exclusive=True, exit_on_error=False, description="Polling the fleet")
    async def poll_fleet(self) -> None:
        """Take snapshots until the app ends; a failed poll is a red notification, not a crash.

        The same failure again (an inventory still missing) is not repeated:
        one notification per new sentence, and polls slow down while it lasts.
        """
        last_error: str | None = None
        while True:
            try:
                snapshot = await self.feed.snapshot()
            except LlmgwError as error:
                if str(error) != last_error:
                    last_error = str(error)
                    self.notify(last_error, title="Fleet", severity="error", timeout=10)
                    self.fleet_failed.publish(last_error)
            else:
                last_error = None
                if snapshot != self.fleet:
                    if self.fleet is None:
                        self.start_preparing_screens()
                    self.fleet = snapshot
                    self.fleet_changed.publish(snapshot)
            if self.feed.refresh_s is None:
                return
            await asyncio.sleep(self.feed.refresh_s * (5 if last_error else 1))

    @work(group="metrics", exclusive=True, exit_on_error=False, description="Exporting metrics")
    async def export_metrics(self) -> None:
        """Serve the feed's latest metrics snapshot until the app ends (the poller's pace).

        A port that cannot be bound is a red notification; the console goes on without it.
        """
        from llmgw_core.metrics import DEFAULT_HOST
        from llmgw_core.metrics.exporter import SnapshotCollector, serve_metrics

        collector = SnapshotCollector()
        try:
            server = serve_metrics(
                collector, self.metrics_port or 0, self.metrics_host or DEFAULT_HOST
            )
        except LlmgwError as error:
            self.notify(error.sentence(), title="Metrics", severity="error", timeout=15)
            return
        self.metrics_url = server.url
        last_error: str | None = None
        try:
            while True:
                try:
                    if self.fleet is not None:  # nothing to export before the first poll
                        collector.update(await self.feed.metrics_snapshot())
                    last_error = None
                except LlmgwError as error:
                    if error.sentence() != last_error:
                        last_error = error.sentence()
                        self.notify(last_error, title="Metrics", severity="error", timeout=10)
                await asyncio.sleep(self.feed.refresh_s or METRICS_IDLE_S)
        finally:
            server.stop()

    @work(group="fleet-refresh", exclusive=True, exit_on_error=False, description="Refreshing")
    async def action_refresh_fleet(self) -> None:
        """Re-read every node's facts now; the poller shows the result."""
        try:
            await self.feed.refresh()
        except LlmgwError as error:
            self.notify(str(error), title="Refresh", severity="error")
            return
        self.notify("Facts re-read from every ready node.", title="Refresh", timeout=3)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A worker that died of an unexpected error is a red notification, never a crash."""
        if event.state == WorkerState.ERROR:
            what = event.worker.description or event.worker.name or "a background task"
            sentence = f"{what} stopped: {event.worker.error}"
            self.notify(sentence, title="Error", severity="error", timeout=15)
            if event.worker.group == "fleet-poll":
                self.fleet_failed.publish(sentence)

    async def action_quit(self) -> None:
        """Quit, unless the screen shown holds typed work and asks for a second `q` first."""
        if isinstance(self.screen, KeptScreen) and self.screen.quit_held():
            return
        self.exit()

    def action_help(self) -> None:
        """Show every key of the current screen."""
        from llmgw_tui.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            return
        keys: list[tuple[str, str]] = []
        seen: set[str] = set()
        screen = self.screen

        def where(node: object) -> int:
            # The screen's own keys first, then the app's, then the focused widget's.
            return 0 if node is screen else 1 if node is self else 2

        ordered = sorted(screen.active_bindings.values(), key=lambda a: where(a.node))
        for active in ordered:
            binding = active.binding
            label = binding.key_display or self.get_key_display(binding)
            if label in seen:
                continue
            seen.add(label)
            keys.append((label, binding.description or binding.action.replace("_", " ")))
        title = self.screen.sub_title or self.screen.__class__.__name__
        self.push_screen(HelpScreen(title, keys))

    def action_command_mode(self) -> None:
        """Open the `:` command line."""
        from llmgw_tui.screens.command_line import CommandLine

        if isinstance(self.screen, CommandLine):
            return
        self.push_screen(CommandLine(), self._run_command)

    async def _run_command(self, command: ParsedCommand | None) -> None:
        if command is not None:
            await self.run_action(command.action)

    async def action_show_fleet(self) -> None:
        """Key 1: every node, its state and cards (kept: shown again as it was left)."""
        await self.show_mode("fleet")

    async def action_show_racks(self) -> None:
        """Key 2: the NVLink domains drawn as racks of trays."""
        await self.show_mode("racks")

    async def action_show_plan(self) -> None:
        """The plan screen, as it was left."""
        await self.show_mode("plan")

    async def action_open_plan(self, model_ref: str) -> None:
        """Plan `model_ref` on this fleet."""
        from llmgw_tui.screens.plan import PlanScreen

        await self.show_mode("plan")
        screen = self.screen
        if isinstance(screen, PlanScreen):
            screen.plan(model_ref)

    async def action_show_replicas(self) -> None:
        """Key 4: every replica, its shards, and what can be done to it."""
        await self.show_mode("replicas")

    async def action_show_serve(self) -> None:
        """The Serve a model wizard, as it was left."""
        await self.show_mode("serve")

    async def action_show_gateways(self) -> None:
        """The gateways screen: fronts, their workers, requests and errors."""
        await self.show_mode("gateways")

    async def action_open_replica(self, name: str) -> None:
        """The replicas screen with the cursor on `name` (now, or once it appears)."""
        from llmgw_tui.screens.replicas import ReplicasScreen

        await self.show_mode("replicas")
        screen = self.screen
        if isinstance(screen, ReplicasScreen):
            screen.show_replica(name)

    async def on_open_replica(self, message: OpenReplica) -> None:
        """A screen asked for a replica: the replicas screen, the cursor on it."""
        await self.action_open_replica(message.name)

    def on_open_logs(self, message: OpenLogs) -> None:
        """A screen asked for a replica's or a gateway's log."""
        from llmgw_tui.screens.logs import LogsScreen

        self.push_screen(LogsScreen(message.name, message.rank, gateway=message.gateway))

    def on_open_node(self, message: OpenNode) -> None:
        """A screen asked for a node's page."""
        self.action_open_node(message.name)

    async def action_open_logs(self, name: str) -> None:
        """The merged log of replica `name` (`NAME rN` or `NAME@N`: one rank's; `gateway NAME`)."""
        from llmgw_tui.screens.logs import LogsScreen

        gateway = gateway_logs_target(name)
        if gateway is not None:
            self.push_screen(LogsScreen(gateway, gateway=True))
            return
        replica, rank = logs_target(name)
        self.push_screen(LogsScreen(replica, rank))

    def action_open_doctor(self, node: str | None = None) -> None:
        """The doctor's checks of every ready node, or of `node`, worst first."""
        from llmgw_tui.screens.doctor import DoctorScreen

        self.push_screen(DoctorScreen(node or None))

    def action_open_fabric(self, nodes: str) -> None:
        """The fabric test between two nodes (`A B`)."""
        names = nodes.replace(",", " ").split()
        if len(names) != 2 or names[0] == names[1]:
            self.notify(f"Give two different nodes (got {nodes!r}).", severity="error")
            return
        known = self.fleet.details if self.fleet is not None else {}
        unknown = [n for n in names if known and n not in known]
        if unknown:
            self.notify(f"No node called {unknown[0]!r}.", severity="error")
            return
        from llmgw_tui.screens.fabric import FabricScreen

        self.push_screen(FabricScreen(names[0], names[1]))

    def action_open_node(self, name: str) -> None:
        """The page of the node called `name`; a red notification when there is none."""
        if self.fleet is not None and name not in self.fleet.details:
            known = ", ".join(n.name for n in self.fleet.nodes)
            self.notify(f"No node called {name!r}. Nodes: {known}.", severity="error")
            return
        from llmgw_tui.screens.node import NodeScreen

        self.push_screen(NodeScreen(name))


def gateway_logs_target(argument: str) -> str | None:
    """`gateway front` or `gw front` → `front`; anything else names a replica (None)."""
    word, _, name = argument.strip().partition(" ")
    if word.lower() not in ("gateway", "gw"):
        return None
    return name.strip() or None


def logs_target(argument: str) -> tuple[str, int | None]:
    """`llama r1` or `llama@1` → (`llama`, 1); a bare name → every rank."""
    name, _, rank = argument.replace("@", " ").partition(" ")
    rank = rank.strip().removeprefix("r")
    return name.strip(), int(rank) if rank.isdigit() else None


def run_app(
    *,
    inventory: str | None,
    demo: bool,
    metrics_port: int | None = None,
    metrics_host: str | None = None,
) -> int:
    """Run the console over an inventory's fleet, or the demo fleet; the exit code."""
    from llmgw_tui.feed import LiveFeed

    app = LlmgwApp(
        LiveFeed(inventory=inventory, demo=demo),
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    result = app.run()
    return result if isinstance(result, int) else (app.return_code or 0)
