"""Replicas, the fleet's SHARDS column and the wizard's greyed-out Next, on the demo snapshot."""

from __future__ import annotations

import asyncio

from live_walk import until
from textual.widgets import Button, Static

from llmgw_tui.fields import env_lines, replica_name_refusal
from llmgw_tui.screens.logs import LogsScreen
from llmgw_tui.screens.replicas import ConfirmStop, ReplicasScreen
from llmgw_tui.screens.serve import ServeScreen, confirm_text


def test_the_fleet_counts_each_nodes_running_shards_from_the_replicas(replica_app):
    async def run() -> None:
        app = replica_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            shards = {n.name: n.running_shards for n in app.fleet.nodes}
            assert shards["h100-a-01"] == 1 and shards["h100-a-02"] == 1
            assert shards["gb200-r1-t01"] == 0

    asyncio.run(run())


def test_a_node_page_lists_the_shards_it_runs_with_the_path_their_nccl_took(demo_state):
    from llmgw_tui.app import LlmgwApp
    from llmgw_tui.feed import StaticFeed
    from llmgw_tui.offline_demo import demo_replica_with_logs

    fleet_state, fabrics = demo_state
    replica, logs = demo_replica_with_logs(fleet_state)

    async def run() -> None:
        app = LlmgwApp(StaticFeed(fleet_state, fabrics, replicas=[replica], logs=logs))
        async with app.run_test(size=(120, 40)) as pilot:
            await app.workers.wait_for_complete()
            await app.run_action("open_node('h100-a-02')")
            await app.workers.wait_for_complete()
            await pilot.pause()
            shown = str(app.screen.query_one("#node-replicas", Static).render())
            # The demo replica's NCCL was kept off its adapters: on this two-node
            # replica both paths are said, the inside one first.
            assert (
                shown == "llama-405b r1 · 8: GPU-0 … GPU-7 · running · NCCL NVLink + Socket (TCP)"
            )

    asyncio.run(run())


def test_replicas_list_the_replica_open_its_logs_and_a_stop_asks_first(replica_app):
    async def run() -> None:
        app = replica_app()
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            await pilot.press("4")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, ReplicasScreen)
            for _ in range(20):
                await pilot.pause(0.05)
                if screen.views:
                    break
            assert screen.selected() == "llama-405b"
            status = str(screen.query_one("#replicas-status", Static).content)
            assert status == "1 replica · 1 ready"
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, LogsScreen) and app.screen.rank is None
            await pilot.press("escape")
            await pilot.pause()
            await pilot.press("s")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmStop)
            await pilot.press("n")
            await pilot.pause()
            assert app.screen is screen

    asyncio.run(run())


def test_env_entries_are_checked_against_the_allowlist():
    assert env_lines("NCCL_DEBUG=INFO  VLLM_LOGGING_LEVEL=DEBUG") == {
        "NCCL_DEBUG": "INFO",
        "VLLM_LOGGING_LEVEL": "DEBUG",
    }
    # A value may hold commas, as the headless `env:` takes it (one rule, the core's).
    assert env_lines("NCCL_IB_HCA=mlx5_0,mlx5_1 NCCL_DEBUG=INFO") == {
        "NCCL_IB_HCA": "mlx5_0,mlx5_1",
        "NCCL_DEBUG": "INFO",
    }
    for bad in ("NCCL_DEBUG", "CUDA_VISIBLE_DEVICES=1"):
        try:
            env_lines(bad)
        except Exception as exc:
            assert bad.split("=")[0] in str(exc)
        else:
            raise AssertionError(f"{bad!r} was accepted")


def test_a_replica_name_must_start_with_a_letter_or_digit():
    assert replica_name_refusal("llama-70b") is None
    assert replica_name_refusal("-x") is not None
    assert replica_name_refusal("") == "name: type a name"


def test_the_wizard_greys_out_next_with_the_reason_until_the_input_is_valid(make_app):
    async def run() -> None:
        app = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.press("5")
            await pilot.pause()
            wizard = app.screen
            assert isinstance(wizard, ServeScreen)
            next_button = wizard.query_one("#serve-next-button", Button)
            assert next_button.disabled and wizard.blocked == "type a model"
            await pilot.press(*"catalog:meta-llama/Llama-3.3-70B-Instruct", "enter")
            await until(pilot, lambda: wizard.step == "way", 'wizard.step == "way"', timeout_s=10)
            assert wizard.plan_body is not None and len(wizard.plan_body["options"]) == 9
            # The last: vLLM's CPU backend on the demo's CPU node (a NUMA node of 256 GiB).
            assert wizard.plan_body["options"][-1]["layout"] == "vLLM in RAM, 1 NUMA node"
            await pilot.press("enter")
            await until(
                pilot,
                lambda: wizard.step == "size" and wizard.blocked is None,
                'wizard.step == "size" and wizard.blocked is None',
                timeout_s=10,
            )
            context = wizard.query_one("#serve-context")
            context.value = "0"
            await pilot.pause()
            assert wizard.blocked == "context: 0 is not between 1 and 16777216"
            assert next_button.disabled and context.has_class("-invalid")
            context.value = "10000000"
            await pilot.pause()  # the change is handled before the wait looks
            await until(
                pilot,
                lambda: wizard.blocked not in (None, "checking…"),
                'wizard.blocked not in (None, "checking…")',
                timeout_s=10,
            )
            assert "longer than the 131072 tokens the model was trained for" in wizard.blocked
            context.value = "32768"
            await pilot.pause()  # the change is handled before the wait looks
            await until(
                pilot, lambda: wizard.blocked is None, "wizard.blocked is None", timeout_s=10
            )
            assert not next_button.disabled

    asyncio.run(run())


def test_the_wizards_confirmation_names_a_rail_left_out_and_why():
    from llmgw_core.script.steps.serve import ServeArgs

    warning = (
        "mlx5_5 on h100-a-01 is left out of NCCL_IB_HCA: its fabric test measured "
        "60% of its rate with h100-a-02 at 2026-12-01 18:40 UTC"
    )
    preview = {
        "name": "llama-2x8",
        "model": "catalog:meta-llama/Llama-3.3-70B-Instruct",
        "context": 32768,
        "way": {"label": "2 nodes × 8 × h100-80g", "engine": "vllm"},
        "executor": "mp",
        "shards": [],
        "warnings": [warning],
    }
    text = confirm_text(ServeArgs(model=preview["model"]), preview)
    assert f"  ! {warning}" in text.splitlines()


def test_a_fit_answered_for_an_older_context_never_clears_the_refusal_of_the_new_one(make_app):
    """The console's own walk found it: a fit for 131072 tokens came back after 33 digits
    were typed, cleared the refusal, and Enter went on to page 4."""

    async def run() -> None:
        app = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.press("5")
            await pilot.pause()
            wizard = app.screen
            assert isinstance(wizard, ServeScreen)
            await pilot.press(*"catalog:meta-llama/Llama-3.1-8B-Instruct", "enter")
            await until(pilot, lambda: wizard.step == "way", 'wizard.step == "way"', timeout_s=10)
            await pilot.press("enter")
            await until(
                pilot,
                lambda: wizard.step == "size" and wizard.blocked is None,
                'wizard.step == "size" and wizard.blocked is None',
                timeout_s=10,
            )
            checked_for = (int(wizard.query_one("#serve-context").value), 1)
            wizard.query_one("#serve-context").value = "9" * 33
            await pilot.pause()
            refused = wizard.blocked
            assert refused is not None and refused.startswith("context: a whole number")
            wizard._size_result(wizard.plan_body, None, checked_for)  # the late answer
            assert wizard.blocked == refused
            await pilot.press("enter")
            await pilot.pause()
            assert wizard.step == "size"

    asyncio.run(run())


def test_the_key_field_takes_a_variable_set_here_by_the_serve_steps_rule(monkeypatch):
    from llmgw_tui.fields import key_env_refusal

    monkeypatch.delenv("LLMGW_UNSET_KEY", raising=False)
    monkeypatch.setenv("LLMGW_SET_KEY", "sk-set")
    monkeypatch.setenv("LLMGW_SPACED_KEY", "sk with space")
    assert key_env_refusal("") is None and key_env_refusal("LLMGW_SET_KEY") is None
    assert key_env_refusal("LLMGW_UNSET_KEY") == (
        "key: the variable LLMGW_UNSET_KEY holding the replica's key is not set: "
        "export it before starting the console, or empty this field"
    )
    assert "space or a control character" in (key_env_refusal("LLMGW_SPACED_KEY") or "")
    assert (key_env_refusal("9LIVES") or "").startswith("key: a variable's name")
