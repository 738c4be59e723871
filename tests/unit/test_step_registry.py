"""The table of step modules: every registered step is listed under its name, and loads alone."""

from __future__ import annotations

from llmgw_core.script.registry import all_steps, known_step_names, load_step, module_of
from llmgw_core.script.steps import STEP_MODULES


def test_every_registered_step_is_listed_with_the_module_that_registers_it():
    for name, step in all_steps().items():
        assert STEP_MODULES.get(name) == module_of(step), (
            f"add {name!r}: {module_of(step)!r} to STEP_MODULES in llmgw_core/script/steps/__init__.py"
        )


def test_every_listed_module_registers_the_step_it_is_listed_for():
    registered = all_steps()
    for name, module in STEP_MODULES.items():
        assert name in registered, f"{module} does not register a step named {name!r}"


def test_loading_a_step_gives_its_argument_model_and_runner():
    plan = load_step("plan")
    assert plan is not None and plan.name == "plan"
    assert plan.args_model.model_validate({"model": "catalog:x"}).model == "catalog:x"


def test_a_step_nobody_registers_is_none_and_the_known_names_are_sorted():
    assert load_step("plna") is None
    names = known_step_names()
    assert names == sorted(names) and {"plan", "nodes", "serve"} <= set(names)
