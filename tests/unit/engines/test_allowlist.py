"""`--env KEY=VALUE`: engine tuning variables only, values checked, secrets never."""

from __future__ import annotations

import pytest
from engine_nodes import request

from llmgw_core.engines import build_launch, is_secret_key, parse_env_options, redact_env
from llmgw_core.engines.allowlist import MAX_VALUE_CHARS, checked_env
from llmgw_core.errors import BadInput


@pytest.mark.parametrize(
    "option",
    [
        "NCCL_DEBUG=INFO",
        "NCCL_IB_TIMEOUT=22",
        "VLLM_LOGGING_LEVEL=DEBUG",
        "SGLANG_HEALTH_CHECK_TIMEOUT=60",
        "UCX_TLS=rc,cuda_copy",
        "GLOO_SOCKET_IFNAME=eno1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "CUDA_DEVICE_MAX_CONNECTIONS=1",
        "OMP_NUM_THREADS=8",
        "HF_HUB_OFFLINE=1",
        "HF_HUB_ENABLE_HF_TRANSFER=1",
        "TOKENIZERS_PARALLELISM=false",
        "RAY_DEDUP_LOGS=0",
        "NVSHMEM_IB_ENABLE_IBGDA=1",
    ],
)
def test_engine_tuning_variables_are_taken(option):
    key, _, value = option.partition("=")
    assert parse_env_options([option]) == {key: value}


def test_a_value_may_hold_equals_signs_and_be_empty():
    assert parse_env_options(["NCCL_IB_HCA==mlx5_0", "NCCL_DEBUG_SUBSYS="]) == {
        "NCCL_IB_HCA": "=mlx5_0",
        "NCCL_DEBUG_SUBSYS": "",
    }


def test_the_last_of_two_equal_keys_wins():
    assert parse_env_options(["NCCL_DEBUG=WARN", "NCCL_DEBUG=INFO"]) == {"NCCL_DEBUG": "INFO"}


def test_a_variable_outside_the_allowlist_is_refused_by_name():
    with pytest.raises(BadInput) as refused:
        parse_env_options(["LD_PRELOAD=/tmp/evil.so"])
    assert refused.value.message == (
        "--env refuses the variable LD_PRELOAD (not an engine tuning variable)"
    )
    assert "NCCL_*" in refused.value.fix
    assert "OMP_NUM_THREADS" in refused.value.fix


def test_every_refused_variable_is_named_in_one_sentence():
    with pytest.raises(BadInput) as refused:
        parse_env_options(["PATH=/tmp", "NCCL_DEBUG=INFO", "HF_TOKEN=hf_x"])
    message = refused.value.message
    assert message.startswith("--env refuses the variables PATH (not an engine tuning variable);")
    assert "HF_TOKEN (a secret never goes on a command line" in message
    assert "NCCL_DEBUG" not in message


@pytest.mark.parametrize(
    "key", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY", "AWS_SECRET_ACCESS_KEY"]
)
def test_secrets_are_refused_on_the_command_line(key):
    with pytest.raises(BadInput, match=f"{key} \\(a secret never goes on a command line"):
        parse_env_options([f"{key}=value"])


def test_a_secret_value_is_never_echoed_in_the_refusal():
    with pytest.raises(BadInput) as refused:
        parse_env_options(["HF_TOKEN=hf_supersecretvalue"])
    assert "hf_supersecretvalue" not in refused.value.sentence()


def test_the_cards_are_not_the_operators_to_choose():
    with pytest.raises(BadInput, match="CUDA_VISIBLE_DEVICES \\(the cards are the ones placement"):
        parse_env_options(["CUDA_VISIBLE_DEVICES=0,1"])


def test_a_value_with_a_newline_is_refused():
    with pytest.raises(BadInput, match="NCCL_DEBUG \\(its value holds a newline"):
        checked_env({"NCCL_DEBUG": "INFO\nLD_PRELOAD=/tmp/x.so"})


def test_a_value_with_a_nul_is_refused():
    with pytest.raises(BadInput, match="its value holds a newline or another control character"):
        checked_env({"NCCL_DEBUG": "INFO\x00"})


def test_a_value_over_the_length_cap_is_refused():
    with pytest.raises(BadInput, match=f"over the {MAX_VALUE_CHARS} taken"):
        checked_env({"NCCL_DEBUG": "I" * (MAX_VALUE_CHARS + 1)})


@pytest.mark.parametrize("key", ["nccl_debug", "NCCL-DEBUG", "1NCCL", "NCCL DEBUG"])
def test_a_name_that_is_not_a_variable_name_is_refused(key):
    with pytest.raises(BadInput, match="not a variable name"):
        checked_env({key: "1"})


def test_an_option_without_an_equals_sign_says_how_to_write_it():
    with pytest.raises(BadInput) as refused:
        parse_env_options(["NCCL_DEBUG"])
    assert refused.value.sentence() == (
        "--env 'NCCL_DEBUG' is not KEY=VALUE: write it as --env NCCL_DEBUG=INFO"
    )


def test_a_launch_with_a_refused_variable_is_refused_before_anything_is_built():
    with pytest.raises(BadInput, match="LD_LIBRARY_PATH"):
        build_launch(request(extra_env={"LD_LIBRARY_PATH": "/tmp"}))


def test_tokenizers_parallelism_is_no_secret_but_hf_token_is():
    assert not is_secret_key("TOKENIZERS_PARALLELISM")
    assert not is_secret_key("VLLM_MAX_TOKENS_PER_BATCH")
    assert is_secret_key("HF_TOKEN")
    assert is_secret_key("VLLM_API_KEY")


def test_secrets_are_hidden_when_an_environment_is_shown():
    shown = redact_env({"HF_TOKEN": "hf_abc", "NCCL_DEBUG": "INFO"})
    assert shown == {"HF_TOKEN": "***", "NCCL_DEBUG": "INFO"}


def test_a_number_from_a_script_is_taken_as_its_text():
    assert checked_env({"OMP_NUM_THREADS": 8, "NCCL_IB_TIMEOUT": 22}) == {
        "OMP_NUM_THREADS": "8",
        "NCCL_IB_TIMEOUT": "22",
    }


def test_a_yaml_boolean_is_refused_with_the_advice_to_quote_it():
    with pytest.raises(BadInput) as refused:
        checked_env({"TOKENIZERS_PARALLELISM": False})
    assert refused.value.message == (
        "--env refuses the variable TOKENIZERS_PARALLELISM (its value is bool, not text: quote it)"
    )
