"""Hypothesis drives the adapter readers with hostile configs, headers and GGUF bytes.

Whatever an `adapter_config.json` holds, whatever bytes a safetensors or a
GGUF adapter is made of, the reader returns the adapter's shape or refuses
with `BadInput` and one sentence — never another exception. And a script
naming such an adapter ends in that sentence and exit code 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lora_files import TINY_GGUF, Widths, write_gguf_adapter, write_peft_adapter

from llmgw_core.errors import BadInput
from llmgw_core.model.adapter_source import load_adapter

SMALL = Widths(hidden=64, intermediate=128, heads=4, kv_heads=2, layers=2)
KEYS = ("r", "lora_alpha", "target_modules", "peft_type", "use_dora", "modules_to_save", "bias",
        "rank_pattern", "base_model_name_or_path")  # fmt: skip
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**40), 10**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _refused_in_a_sentence(read) -> None:
    try:
        read()
    except BadInput as exc:
        sentence = exc.sentence()
        assert sentence and "\n" not in sentence and len(sentence) < 600, sentence


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(changes=st.dictionaries(st.sampled_from(KEYS), JSON, min_size=1, max_size=4))
def test_a_hostile_adapter_config_is_a_shape_or_a_sentence(tmp_path_factory, changes) -> None:
    folder = write_peft_adapter(tmp_path_factory.mktemp("a") / "x", SMALL, config=changes)
    _refused_in_a_sentence(lambda: load_adapter("x", str(folder)))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_damaged_safetensors_and_gguf_adapters_are_a_shape_or_a_sentence(
    tmp_path_factory, data
) -> None:
    root = tmp_path_factory.mktemp("d")
    folder = write_peft_adapter(root / "peft", SMALL)
    gguf_path = write_gguf_adapter(root / "a.gguf", TINY_GGUF)
    for path in (folder / "adapter_model.safetensors", gguf_path):
        raw = bytearray(path.read_bytes())
        for _ in range(data.draw(st.integers(1, 6))):
            at = data.draw(st.integers(0, min(len(raw) - 1, 4096)))
            raw[at] = data.draw(st.integers(0, 255))
        cut = data.draw(st.integers(0, len(raw)))
        path.write_bytes(bytes(raw[:cut]) if data.draw(st.booleans()) else bytes(raw))
    _refused_in_a_sentence(lambda: load_adapter("p", str(folder)))
    _refused_in_a_sentence(lambda: load_adapter("g", str(gguf_path)))


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"r": "sixteen"}, "r (its rank) is 'sixteen'"),
        ({"use_dora": True}, "DoRA"),
        (
            {"base_model_name_or_path": "mistralai/Mistral-7B-v0.1"},
            "trained on mistralai/Mistral-7B-v0.1",
        ),
    ],
)
def test_a_script_naming_a_bad_adapter_exits_2_with_the_sentence(
    tmp_path: Path, change: dict, words: str
) -> None:
    w8b = Widths(hidden=4096, intermediate=14336, heads=32, kv_heads=8, layers=2)
    folder = write_peft_adapter(tmp_path / "bad", w8b, base_model="meta-llama/Llama-3.1-8B-Instruct",
                                config=change)  # fmt: skip
    script = tmp_path / "plan.yaml"
    script.write_text(
        "fleet:\n  - {name: dgx, count: 1, gpu: h100-80g, gpus: 8}\nsteps:\n"
        "  - plan: {model: catalog:meta-llama/Llama-3.1-8B-Instruct, context: 8192,"
        f" adapters: [{{name: bad, source: {folder}}}]}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "llmgw_tui.cli", "--run", str(script), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert words in line["error"] and "Traceback" not in done.stderr
