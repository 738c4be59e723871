"""The steps a headless script can run, and the contract each one keeps.

A step is a function registered under a name with a pydantic model of its
arguments. The runner validates every step's arguments before anything runs,
then calls the steps in order. Steps live in `llmgw_core/script/steps/`, one
module per step or family; each module registers itself with `@step(...)`
and is named in `steps.STEP_MODULES`, so a script loads the modules of the
steps it names and nothing else (`load_step`): a plan never pays for SSH.

A step returns a `StepOutcome`: a JSON-serialisable `result` (what `--json`
prints) and, for people, an optional renderer that turns that same result
into Rich tables — so the two outputs can never disagree.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from llmgw_core.arguments import StrictArgs
from llmgw_core.script.context import StepContext

EXIT_OK = 0
EXIT_STEP_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_DOES_NOT_FIT = 3


class StepArgs(StrictArgs):
    """Base of every step's arguments: unknown keys are refused, not ignored, and YAML's
    `true` is not the number 1 (`StrictArgs`)."""


@dataclass(frozen=True)
class StepOutcome:
    """What a step did.

    Attributes:
        result: the JSON-serialisable result (`--json` prints it as `result`).
        ok: False when the step failed; `error` then says why in one sentence.
        exit_code: the script's exit code if this is the worst outcome so far
            (0 done, 1 failed, 2 bad input, 3 does not fit).
        error: one sentence, only when not ok.
    """

    result: dict[str, Any] = field(default_factory=dict)
    ok: bool = True
    exit_code: int = EXIT_OK
    error: str | None = None


StepFunction = Callable[[Any, StepContext], "StepOutcome | Awaitable[StepOutcome]"]
Renderer = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class Step:
    """A registered step: its name, its argument model, what it runs, how it is drawn."""

    name: str
    args_model: type[StepArgs]
    run: StepFunction
    render: Renderer | None = None

    async def call(self, args: StepArgs, ctx: StepContext) -> StepOutcome:
        """Run the step, awaiting it when it is a coroutine function."""
        outcome = self.run(args, ctx)
        if isinstance(outcome, Awaitable):
            outcome = await outcome
        return outcome


_STEPS: dict[str, Step] = {}


Registered = TypeVar("Registered", bound=StepFunction)


def step(
    name: str, *, args: type[StepArgs], render: Renderer | None = None
) -> Callable[[Registered], Registered]:
    """Register a step function under `name` with its argument model (it keeps its own type)."""

    def register(function: Registered) -> Registered:
        if name in _STEPS:
            raise RuntimeError(f"step {name!r} is registered twice")
        _STEPS[name] = Step(name=name, args_model=args, run=function, render=render)
        return function

    return register


def load_step(name: str) -> Step | None:
    """The step registered under `name`, importing its module first; None when no module has it.

    The module comes from `steps.STEP_MODULES`; a step missing from that table
    is still found, by importing every module of `steps/` (slower, and
    `tests/unit/test_step_registry.py` says which line to add).
    """
    from llmgw_core.script.steps import STEP_MODULES
    from llmgw_core.startup import loading_modules

    if name not in _STEPS:
        with loading_modules():
            if name in STEP_MODULES:
                importlib.import_module(STEP_MODULES[name])
            if name not in _STEPS:
                _import_every_step_module()
    return _STEPS.get(name)


def known_step_names() -> list[str]:
    """Every step name a script may use, sorted, without importing the steps."""
    from llmgw_core.script.steps import STEP_MODULES

    return sorted(set(STEP_MODULES) | set(_STEPS))


def module_of(step: Step) -> str:
    """The module that registered `step` (what `STEP_MODULES` should name)."""
    return step.run.__module__


def all_steps() -> dict[str, Step]:
    """Every registered step, after importing every module of `steps/` (tests, listings)."""
    _import_every_step_module()
    return dict(_STEPS)


def _import_every_step_module() -> None:
    import pkgutil

    from llmgw_core.script import steps as steps_package

    for info in pkgutil.iter_modules(steps_package.__path__):
        module = f"{steps_package.__name__}.{info.name}"
        if module not in sys.modules:
            importlib.import_module(module)
