"""The KV connectors a split service names, held to the installed vLLM (issues 36 and 40).

`engines/disagg.py` writes `--kv-transfer-config` with a connector's name and a role for
each side. A name vLLM does not register, or a role it does not take, is refused by vLLM
only when the engine starts, on the node. So each name is looked up in the installed
vLLM's connector registry, and each role in its `KVRole`, by reading its source as text
(importing vllm takes seconds of both cores). `.ci/run` installs the real vLLM (the CPU
build, `.venv-vllm`); the test skips, saying why, where it is absent.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from real_vllm import VLLM, skip_without_real_vllm

from llmgw_core.engines.disagg import RULES


@pytest.fixture(scope="module")
def vllm_source() -> Path:
    """The installed vllm package's folder."""
    skip_without_real_vllm()
    found = sorted((VLLM.parent.parent / "lib").glob("python3*/site-packages/vllm"))
    if not found:
        pytest.skip(f"no vllm package beside {VLLM}: LLMGW_VLLM names a vllm installed elsewhere")
    return found[0]


def _registered(source: Path) -> set[str]:
    """The names `KVConnectorFactory.register_connector(NAME, module, class)` registers."""
    text = (source / "distributed/kv_transfer/kv_connector/factory.py").read_text()
    names = set()
    for call in ast.walk(ast.parse(text)):
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "register_connector"
            and call.args
            and isinstance(call.args[0], ast.Constant)
        ):
            names.add(call.args[0].value)
    return names


def _roles(source: Path) -> set[str]:
    """The roles `KVRole` (kv_producer, kv_consumer, kv_both) lists."""
    text = (source / "config/kv_transfer.py").read_text()
    return set(re.findall(r'"(kv_\w+)"', "".join(re.findall(r"KV\w+ = Literal\[[^\]]*\]", text))))


def test_every_vllm_connector_a_split_names_is_registered_with_the_roles_it_is_given(
    vllm_source: Path,
):
    registered, roles = _registered(vllm_source), _roles(vllm_source)
    assert len(registered) > 5 and roles == {"kv_producer", "kv_consumer", "kv_both"}
    ours = [rule for (engine, _), rule in RULES.items() if engine == "vllm"]
    assert ours
    for rule in ours:
        assert rule.engine_name in registered, (rule.connector, sorted(registered))
        assert set(rule.roles) <= roles, rule
