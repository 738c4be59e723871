"""What a step may reach (`StepContext`), kept apart from the registry so the console loads it without pydantic."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from llmgw_core.errors import BadInput


def _to_stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


class StepContext:
    """What a step may reach: the script's folder, the described fleet, the live fleet.

    The live fleet (inventory or demo) is started on first use and closed by
    the runner when the script ends, so a script that only plans against a
    described fleet never opens a connection.
    """

    def __init__(
        self,
        *,
        script_dir: Path,
        described_fleet: list[dict[str, Any]] | None,
        inventory: str | None,
        demo: bool,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.script_dir = script_dir
        self.progress = progress or _to_stderr
        """Where a long step says what it does as it does it (`apply`'s actions): stderr,
        so `--json`'s standard output stays one JSON line per step."""
        self.described_fleet = described_fleet
        self.inventory = inventory
        self.demo = demo
        self._live: Any = None
        self._closers: list[Callable[[], Awaitable[None]]] = []

    def local_path(self, path: str) -> Path:
        """A file on the operator's machine a step names: as given when absolute (or under
        `~`), else from the script's folder, as a local model is."""
        given = Path(path).expanduser()
        return given if given.is_absolute() else self.script_dir / given

    @property
    def has_live_fleet(self) -> bool:
        """True when the script runs against real (or demo) nodes."""
        return bool(self.inventory or self.demo)

    async def live_fleet(self) -> Any:
        """The connected fleet, started on first call (inventory or demo)."""
        if self._live is None:
            if not self.has_live_fleet:
                raise BadInput(
                    "this step needs a fleet to connect to",
                    "pass --inventory FILE or --demo, or give the script an `inventory:` file",
                )
            from llmgw_core.startup import loading_modules

            with loading_modules():
                from llmgw_core.fleet.session import open_fleet

            # The script's end does not wait for each agent to exit (they do, on end of input).
            self._live, closer = await open_fleet(
                inventory=self.inventory, demo=self.demo, wait_for_agents_on_close=False
            )
            self._closers.append(closer)
        return self._live

    @property
    def has_closers(self) -> bool:
        """True when a step opened something the runner must close."""
        return bool(self._closers)

    def add_closer(self, closer: Callable[[], Awaitable[None]]) -> None:
        """Run `closer` when the script ends (successful or not)."""
        self._closers.append(closer)

    async def close(self) -> None:
        """Close everything the steps opened, newest first."""
        while self._closers:
            closer = self._closers.pop()
            await closer()
