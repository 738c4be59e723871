"""Command mode (`:`) and the command palette: one table of commands, two ways in.

Each command names the `action_*` of the app it runs, so a key, a typed
`:racks` and a palette pick all do exactly the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from llmgw_tui.contract import ConsoleApp


@dataclass(frozen=True)
class ConsoleCommand:
    """A command of the console: its names, what it runs, and the argument it takes."""

    names: tuple[str, ...]
    action: str
    help: str
    argument: str | None = None
    bare_action: str | None = None
    """The action when the argument is left out (None: the argument is required)."""


COMMANDS: tuple[ConsoleCommand, ...] = (
    ConsoleCommand(("nodes", "fleet", "no"), "show_fleet", "The fleet: every node at a glance"),
    ConsoleCommand(("racks", "rack", "nvl"), "show_racks", "NVLink domains drawn as racks"),
    ConsoleCommand(("node", "n"), "open_node", "One node's cards, links and adapters", "NAME"),
    ConsoleCommand(
        ("plan", "p", "fit"), "open_plan", "Does a model fit, and how", "MODEL", "show_plan"
    ),
    ConsoleCommand(("replicas", "r", "rs"), "show_replicas", "Replicas: shards, phases, actions"),
    ConsoleCommand(("serve", "s", "up"), "show_serve", "Serve a model: the wizard"),
    ConsoleCommand(
        ("gateways", "gateway", "gw"), "show_gateways", "Gateways: workers, requests, errors"
    ),
    ConsoleCommand(
        ("logs", "log", "l"),
        "open_logs",
        "Logs: a replica's (NAME, NAME rN) or gateway NAME",
        "NAME",
    ),
    ConsoleCommand(
        ("doctor", "doc", "dr"), "open_doctor", "Doctor checks, worst first", "NODE", "open_doctor"
    ),
    ConsoleCommand(("fabric", "fab", "ib"), "open_fabric", "Fabric test between two nodes", "A B"),
    ConsoleCommand(("help", "h"), "help", "The keys of the current screen"),
    ConsoleCommand(("quit", "q", "q!"), "quit", "Leave the console"),
)


@dataclass(frozen=True)
class ParsedCommand:
    """A command line that named a known command, with its argument."""

    command: ConsoleCommand
    argument: str | None

    @property
    def action(self) -> str:
        """The action string the app runs (`open_node('gpu-a-01')`)."""
        if self.command.argument is None:
            return self.command.action
        if self.argument is None:
            return self.command.bare_action or self.command.action
        return f"{self.command.action}({self.argument!r})"


class CommandError(ValueError):
    """A command line that cannot run, with the sentence to show in red."""


def known_names() -> str:
    """Every command's first name, for the error line."""
    return ", ".join(f":{c.names[0]}" for c in COMMANDS)


def parse_command(line: str) -> ParsedCommand:
    """Parse `:racks`, `racks`, `:node gpu-a-01`; raise `CommandError` with the sentence to show."""
    text = line.strip().removeprefix(":").strip()
    if not text:
        raise CommandError(f"Type a command: {known_names()}.")
    word, _, rest = text.partition(" ")
    argument = rest.strip() or None
    for command in COMMANDS:
        if word.lower() in command.names:
            if command.argument and not argument and not command.bare_action:
                raise CommandError(f":{command.names[0]} needs {command.argument}.")
            if not command.argument and argument:
                raise CommandError(f":{command.names[0]} takes no argument (got {argument!r}).")
            return ParsedCommand(command, argument)
    raise CommandError(f"Unknown command :{word}. Known: {known_names()}.")


class ConsoleCommands(Provider):
    """The palette's view of `COMMANDS` (those that need no argument) and of the fleet's nodes."""

    def _entries(self) -> list[tuple[str, str, str]]:
        entries = [
            (command.names[0], command.action, command.help)
            for command in COMMANDS
            if command.argument is None
        ]
        entries.append(("plan", "show_plan", "Does a model fit, and how"))
        entries.append(("doctor", "open_doctor", "Doctor checks of every node, worst first"))
        from llmgw_core.catalog import known_models

        for repo_id in known_models():
            ref = f"catalog:{repo_id}"
            entries.append((f"plan {ref}", f"open_plan({ref!r})", "Plan a model known offline"))
        fleet = cast("ConsoleApp", self.app).fleet  # what a screen may reach of the app
        for node in fleet.nodes if fleet is not None else ():
            entries.append((f"node {node.name}", f"open_node({node.name!r})", "Open the node page"))
        return entries

    async def discover(self) -> Hits:
        """Offer every command before anything is typed."""
        for title, action, help_text in self._entries():
            yield DiscoveryHit(title, partial(self._run, action), help=help_text)

    async def search(self, query: str) -> Hits:
        """Commands whose title matches what was typed, best first."""
        matcher = self.matcher(query)
        for title, action, help_text in self._entries():
            score = matcher.match(title)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(title), partial(self._run, action), help=help_text
                )

    async def _run(self, action: str) -> None:
        await self.app.run_action(action)
