"""What each field of the console takes, and the sentence it gives for what it refuses."""

from __future__ import annotations

import asyncio
import re

import pytest
from textual.widgets import Input

from llmgw_core.script.steps.plan import PlanArgs
from llmgw_core.script.steps.serve import ServeArgs
from llmgw_tui.fields import (
    DIGITS,
    command_refusal,
    control_refusal,
    env_refusal,
    filter_refusal,
    model_ref_refusal,
    replica_name_refusal,
    save_path_refusal,
    whole_number,
)
from llmgw_tui.screens.plan import PlanScreen


def _why(validator, text: str) -> str | None:
    result = validator.validate(text)
    return None if result.is_valid else result.failure_descriptions[0]


@pytest.mark.parametrize(
    ("typed", "why"),
    [
        ("8192", None),
        ("16777216", None),
        ("0", "context: 0 is not between 1 and 16777216"),
        ("16777217", "context: 16777217 is not between 1 and 16777216"),
        ("1e309", "context: a whole number from 1 to 16777216 (not '1e309')"),
        ("nan", "context: a whole number from 1 to 16777216 (not 'nan')"),
        ("-1", "context: a whole number from 1 to 16777216 (not '-1')"),
        ("٣٢", "context: a whole number from 1 to 16777216 (not '٣٢')"),
        ("9" * 400, f"context: a whole number from 1 to 16777216 (not '{'9' * 21}…')"),
        ("", "context: type a whole number from 1 to 16777216"),
    ],
)
def test_a_context_is_a_whole_number_within_the_serve_steps_own_bounds(typed, why):
    assert _why(whole_number(ServeArgs, "context", "context"), typed) == why


def test_bounds_come_from_each_steps_field():
    assert _why(whole_number(ServeArgs, "fallbacks", "fallbacks", optional=True), "") is None
    assert _why(whole_number(ServeArgs, "fallbacks", "fallbacks"), "17") == (
        "fallbacks: 17 is not between 0 and 16"
    )
    assert _why(whole_number(PlanArgs, "concurrency", "sequences"), "65537") == (
        "sequences: 65537 is not between 1 and 65536"
    )


def test_environment_entries_are_key_value_and_allowlisted_naming_what_is_refused():
    assert env_refusal("NCCL_DEBUG=INFO VLLM_LOGGING_LEVEL=DEBUG") is None
    assert env_refusal("") is None
    assert env_refusal("nope") == (
        "environment: 'nope' is not KEY=VALUE: write it as NCCL_DEBUG=INFO"
    )
    assert "A (" in (env_refusal("A=B=C") or "")
    assert "CUDA_VISIBLE_DEVICES" in (env_refusal("CUDA_VISIBLE_DEVICES=0") or "")
    assert "HF_TOKEN" in (env_refusal("HF_TOKEN=hf_x") or "")


def test_a_replica_name_follows_the_serve_steps_pattern():
    assert replica_name_refusal("llama-70b") is None
    assert replica_name_refusal("") == "name: type a name"
    for bad in ("-x", "a b", "x" * 65, "../../etc", "é"):
        assert (replica_name_refusal(bad) or "").startswith("name: letters, digits")


def test_invisible_and_reordering_characters_are_refused_in_text():
    assert control_refusal("catalog:meta-llama/Llama-3.1-8B-Instruct") is None
    assert control_refusal("\u202etxt.exe") == (
        "it holds the invisible character U+202E: type plain text"
    )
    assert model_ref_refusal("org/model\x00") == (
        "model: it holds the invisible character U+0000: type plain text"
    )
    assert model_ref_refusal("x" * 600) == "model: 600 characters is too long for a model reference"
    assert filter_refusal("h100") is None and filter_refusal("x\u2067y") is not None


def test_a_save_path_names_a_file_in_a_folder_that_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert save_path_refusal("llama.log") is None
    assert save_path_refusal(str(tmp_path)) == f"path: {tmp_path} is a folder: name a file in it"
    assert save_path_refusal("nowhere/llama.log") == "path: there is no folder nowhere"
    assert save_path_refusal("/etc") == "path: /etc is a folder: name a file in it"
    assert save_path_refusal("") == "path: type where to save the lines"
    assert "U+0000" in (save_path_refusal("a\x00b") or "")


def test_a_command_half_typed_is_not_refused_and_an_unknown_one_is():
    assert command_refusal("rac") is None
    assert command_refusal(":node h100-a-01") is None
    assert (command_refusal("frobnicate") or "").startswith("Unknown command :frobnicate.")
    assert command_refusal("racks now") == ":racks takes no argument (got 'now')."


def test_a_long_run_of_digits_then_a_letter_is_checked_in_linear_time():
    """Textual's integer pattern took minutes for 32 digits and a letter; this must not."""
    assert re.fullmatch(DIGITS, "9" * 100_000 + "c") is None


def test_digits_then_a_letter_typed_into_the_plans_context_leave_the_digits(make_app):
    async def run() -> None:
        app = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.press("3")
            await pilot.pause()
            assert isinstance(app.screen, PlanScreen)
            await pilot.press("tab", *("9" * 40), "c")
            context = app.screen.query_one("#plan-context", Input)
            assert context.value == "9" * 40
            assert context.has_class("-invalid") and "a whole number" in context.border_subtitle

    asyncio.run(run())
