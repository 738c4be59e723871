"""The headless runner: `llmgw-tui --run SCRIPT [--json]`.

A script is a YAML mapping:

    fleet:        # optional: a described fleet, for planning without connecting
      - {name: dgx, count: 2, gpu: h100-80g, gpus: 8, fabric: ib-a}
    inventory: fleet.yaml   # optional: an inventory file (relative to the script)
    steps:
      - plan: {model: meta-llama/Llama-3.3-70B-Instruct, context: 32768}

Every step is validated before anything runs; a bad one is reported with its
line and the script exits 2. Steps then run in order and the first failure
stops the script, unless that step says `on_fail: continue` (any step
takes it beside its own arguments): then the next step runs and the
script still ends with the failed step's exit code. Exit codes: 0 done, 1 a step failed, 2 bad input, 3 the
model does not fit.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from llmgw_core.arguments import validation_sentence
from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.script.registry import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_STEP_FAILED,
    Step,
    StepArgs,
    StepContext,
    StepOutcome,
    known_step_names,
    load_step,
)
from llmgw_core.yaml_text import MAX_TEXT_BYTES, decode_text, line_of, load_checked, read_text_file

TOP_LEVEL_KEYS = {"steps", "fleet", "inventory"}
ON_FAIL = ("stop", "continue")
"""What a step's failure does to the script: end it (the default) or go on to the next step."""

T = TypeVar("T")


@dataclass(frozen=True)
class PlannedStep:
    """A step of the script, validated, with the line it came from."""

    line: int
    step: Step
    args: StepArgs
    on_fail: str = "stop"


@dataclass(frozen=True)
class Script:
    """A validated script."""

    steps: list[PlannedStep]
    described_fleet: list[dict[str, Any]] | None
    inventory: str | None
    folder: Path


def _line(node: yaml.Node) -> int:
    return line_of(node)


def parse_script(text: str, *, folder: Path, source: str = "script") -> Script:
    """Parse and validate a whole script before anything runs.

    Raises:
        BadInput: naming the line and what is wrong with it.
    """
    root, data = load_checked(text, source)
    if root is None:
        raise BadInput(f"{source} is empty", "give it a `steps:` list")
    if not isinstance(root, yaml.MappingNode):
        raise BadInput(f"{source}: line {_line(root)}: a script is a mapping with `steps:`")
    for key_node, _ in root.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise BadInput(
                f"{source}: line {_line(key_node)}: a script's keys are names such as `steps:`"
            )
    if not isinstance(data, dict):
        raise BadInput(f"{source}: line {_line(root)}: a script is a mapping with `steps:`")
    key_lines = {key.value: _line(key) for key, _ in root.value if isinstance(key, yaml.ScalarNode)}
    unknown = sorted(set(data) - TOP_LEVEL_KEYS, key=str)
    if unknown:
        key = unknown[0]
        raise BadInput(
            f"{source}: line {key_lines.get(key, 1)}: unknown key {key!r}",
            f"a script has {', '.join(sorted(TOP_LEVEL_KEYS))}",
        )
    steps_node = next((v for k, v in root.value if k.value == "steps"), None)
    if steps_node is None or not isinstance(steps_node, yaml.SequenceNode):
        line = _line(steps_node) if steps_node is not None else 1
        raise BadInput(f"{source}: line {line}: `steps:` must be a list of steps")
    planned: list[PlannedStep] = []
    for item_node, item in zip(steps_node.value, data["steps"], strict=True):
        line = _line(item_node)
        if not isinstance(item, dict) or len(item) != 1:
            raise BadInput(
                f"{source}: line {line}: a step is a one-key mapping such as `- plan: {{...}}`"
            )
        ((name, raw_args),) = item.items()
        definition = load_step(name) if isinstance(name, str) else None
        if definition is None:
            raise BadInput(
                f"{source}: line {line}: unknown step {name!r}",
                f"known steps are {', '.join(known_step_names())}",
            )
        on_fail, raw_args = _on_fail(raw_args, f"{source}: line {line}: step {name!r}")
        try:
            args = definition.args_model.model_validate(raw_args or {})
        except ValidationError as exc:
            raise BadInput(
                f"{source}: line {line}: step {name!r}: {validation_sentence(exc)}"
            ) from None
        planned.append(PlannedStep(line=line, step=definition, args=args, on_fail=on_fail))
    fleet = data.get("fleet")
    if fleet is not None and not isinstance(fleet, list):
        raise BadInput(f"{source}: line {key_lines['fleet']}: `fleet:` must be a list of nodes")
    if fleet:
        _check_described_fleet(root, fleet, source=source, line=key_lines["fleet"])
    inventory = data.get("inventory")
    if inventory is not None and not isinstance(inventory, str):
        raise BadInput(f"{source}: line {key_lines['inventory']}: `inventory:` must be a file path")
    return Script(steps=planned, described_fleet=fleet, inventory=inventory, folder=folder)


def _on_fail(raw_args: Any, where: str) -> tuple[str, Any]:
    """A step's `on_fail` (default `stop`) and its own arguments without it.

    Raises:
        BadInput: `on_fail` is neither `stop` nor `continue`.
    """
    if not isinstance(raw_args, dict) or "on_fail" not in raw_args:
        return "stop", raw_args
    rest = {key: value for key, value in raw_args.items() if key != "on_fail"}
    on_fail = raw_args["on_fail"]
    if on_fail not in ON_FAIL:
        raise BadInput(f"{where}: on_fail must be `stop` or `continue`, not {on_fail!r}")
    return on_fail, rest


def _check_described_fleet(
    root: yaml.MappingNode, fleet: list[Any], *, source: str, line: int
) -> None:
    """Check a described fleet entry by entry, so a bad one is named by its line."""
    from llmgw_core.planner.pools import check_described_names, check_fleet_entry

    fleet_node = next(v for k, v in root.value if k.value == "fleet")
    entries = []
    for index, (entry_node, entry) in enumerate(zip(fleet_node.value, fleet, strict=True)):
        try:
            entries.append(check_fleet_entry(entry, index))
        except BadInput as exc:
            raise BadInput(f"{source}: line {_line(entry_node)}: {exc.message}", exc.fix) from None
    try:
        check_described_names(entries)
    except BadInput as exc:
        raise BadInput(f"{source}: line {line}: {exc.message}", exc.fix) from None


def _read_script(path: str) -> tuple[str, Path, str]:
    if path == "-":
        raw = sys.stdin.buffer.read(MAX_TEXT_BYTES + 1)
        return decode_text(raw, "stdin"), Path.cwd(), "stdin"
    file = Path(path)
    try:
        return read_text_file(file, f"the script {path}"), file.resolve().parent, str(path)
    except OSError as exc:
        raise BadInput(f"cannot read script {path}: {exc.strerror or exc}") from None


class _Printer:
    """Prints each step as JSON lines or as tables for people (Rich loads with the first table)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self._rich_console: Any = None

    @property
    def _console(self) -> Any:
        if self._rich_console is None:
            from rich.console import Console

            self._rich_console = Console(highlight=False)
        return self._rich_console

    def outcome(self, step: Step, outcome: StepOutcome) -> None:
        if self.as_json:
            line: dict[str, Any] = {"step": step.name, "ok": outcome.ok}
            if outcome.ok:
                line["result"] = outcome.result
            else:
                line["error"] = outcome.error
                if outcome.result:
                    line["result"] = outcome.result
            print(json.dumps(line, default=str), flush=True)
            return
        if outcome.ok or outcome.result:
            if step.render is not None:
                self._console.print(step.render(outcome.result))
            else:
                self._console.print_json(json.dumps(outcome.result, default=str))
        if not outcome.ok:
            # Text, not markup: an error may quote a model name holding `[/red]`;
            # one line, never wrapped, so the sentence reads (and greps) whole.
            from rich.text import Text

            self._console.print(Text(f"{step.name}: {outcome.error}", style="red"), soft_wrap=True)

    def bad_input(self, sentence: str) -> None:
        if self.as_json:
            print(json.dumps({"step": None, "ok": False, "error": sentence}), flush=True)
        else:
            print(f"llmgw-tui: {sentence}", file=sys.stderr)


class _EventLoop:
    """The event loop the async steps share, started by the first one that needs it.

    A plan against a described fleet runs without one, so the runner does
    not import asyncio (a fifth of its start-up) before its first step.
    """

    def __init__(self) -> None:
        self._loop: Any = None

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run `awaitable` to its end on the shared loop."""
        if self._loop is None:
            import asyncio

            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
        return self._loop.run_until_complete(awaitable)

    def close(self) -> None:
        """Cancel what is left and close the loop, as `asyncio.run` does."""
        if self._loop is None:
            return
        import asyncio

        loop = self._loop
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _run(script: Script, printer: _Printer, *, inventory: str | None, demo: bool) -> int:
    if script.inventory and not inventory:
        inventory = str((script.folder / script.inventory).resolve())
    ctx = StepContext(
        script_dir=script.folder,
        described_fleet=script.described_fleet,
        inventory=inventory,
        demo=demo,
    )
    loop = _EventLoop()
    worst = EXIT_OK
    try:
        for planned in script.steps:
            try:
                outcome = planned.step.run(planned.args, ctx)
                if isinstance(outcome, Awaitable):
                    outcome = loop.run(outcome)
            except LlmgwError as exc:
                outcome = StepOutcome(ok=False, exit_code=exc.exit_code, error=exc.sentence())
            printer.outcome(planned.step, outcome)
            code = outcome.exit_code or (EXIT_OK if outcome.ok else EXIT_STEP_FAILED)
            worst = max(worst, code)
            if not outcome.ok and planned.on_fail == "stop":
                return code
    finally:
        try:
            if ctx.has_closers:
                loop.run(ctx.close())
        except LlmgwError as exc:
            printer.bad_input(exc.sentence())
        finally:
            loop.close()
    return worst


def run_script(path: str, *, as_json: bool, inventory: str | None, demo: bool) -> int:
    """Run a script end to end and return the process exit code."""
    printer = _Printer(as_json)
    try:
        text, folder, source = _read_script(path)
        script = parse_script(text, folder=folder, source=source)
    except BadInput as exc:
        printer.bad_input(exc.sentence())
        return EXIT_BAD_INPUT
    try:
        return _run(script, printer, inventory=inventory, demo=demo)
    except KeyboardInterrupt:
        printer.bad_input("interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (`... --json | head`): stop quietly, as a pipe should.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_STEP_FAILED
