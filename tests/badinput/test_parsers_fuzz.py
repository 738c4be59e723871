"""Hypothesis drives every parser of text from a node with damaged real captures.

Each parser takes a real capture from `../shared/fixtures/hardware`, cut,
spliced and sprinkled with bytes, and must return its record or refuse with
its own error carrying a sentence — never another exception, never a hang.
(The GGUF header, `config.json` and the agent's protocol have their own fuzz
tests beside their code: tests/unit/model/, tests/agent/.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from generate import HARDWARE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgw_agent.discover import ib, imex, smi, topo
from llmgw_core.errors import LlmgwError
from llmgw_core.fabric.nccl import parse_all_reduce_perf, parse_nccl_transport
from llmgw_core.fabric.perftest import parse_ib_write_bw

EXAMPLES = 60


def _captures(pattern: str) -> list[str]:
    return [p.read_text(errors="replace") for p in sorted(HARDWARE.glob(pattern))] or [""]


def damaged(texts: list[str]) -> st.SearchStrategy[str]:
    """A real capture cut at a random place, a random slice repeated, random characters put in."""

    @st.composite
    def build(draw: Any) -> str:
        text = draw(st.sampled_from(texts))
        if text:
            start = draw(st.integers(0, len(text)))
            end = draw(st.integers(start, len(text)))
            text = draw(
                st.sampled_from(
                    [text[:start], text[start:], text[:start] + text[end:], text + text[start:end]]
                )
            )
        for _ in range(draw(st.integers(0, 4))):
            at = draw(st.integers(0, len(text)))
            noise = draw(
                st.text(max_size=12) | st.sampled_from(["\x00", "\n\n", "\t", " X ", "NV99"])
            )
            text = text[:at] + noise + text[at:]
        return text

    return build()


def _survives(parse: Callable[[str], Any], text: str, allowed: tuple[type[Exception], ...]) -> None:
    try:
        parse(text)
    except allowed as exc:
        assert str(exc).strip() and "\n" not in str(exc).strip(), repr(exc)


PARSERS: dict[str, tuple[str, Callable[[str], Any], tuple[type[Exception], ...]]] = {
    "nvidia-smi -q -x": ("nvidia-smi-q-x_*.xml", smi.parse_smi_xml, (smi.SmiParseError,)),
    "nvidia-smi -q": ("nvidia-smi-q-text_*.txt", smi.parse_smi_text, (smi.SmiParseError,)),
    "nvidia-smi -L": ("nvidia-smi-L_*.txt", smi.parse_smi_list, ()),
    "nvidia-smi --query-gpu csv": ("nvidia-smi-query-gpu-csv_*.csv", smi.parse_query_gpu_csv, ()),
    "nvidia-smi topo -m": ("topo-m_*.txt", topo.parse_topo, ()),
    "ibstat": ("ibstat_*.txt", ib.parse_ibstat, ()),
    "ibstatus": ("ibstatus_*.txt", ib.parse_ibstatus, ()),
    "ibv_devinfo": ("ibv_devinfo_*.txt", ib.parse_ibv_devinfo, ()),
    "nvidia-imex-ctl -N": ("nvidia-imex-ctl-N_*.txt", imex.parse_imex_nodes, ()),
    "NCCL INFO lines": (
        "nccl-debug-info_*.txt",
        lambda text: parse_nccl_transport(text.splitlines()),
        (LlmgwError,),
    ),
    "all_reduce_perf": ("all_reduce_perf_*.txt", parse_all_reduce_perf, (LlmgwError,)),
    "ib_write_bw": ("ib_write_bw_*.txt", parse_ib_write_bw, (LlmgwError,)),
}


@pytest.mark.skipif(not HARDWARE.exists(), reason="the shared hardware captures are absent")
@pytest.mark.parametrize("name", sorted(PARSERS))
def test_a_damaged_capture_is_read_or_refused_with_a_sentence(name: str) -> None:
    pattern, parse, allowed = PARSERS[name]
    texts = _captures(pattern)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(text=damaged(texts))
    def run(text: str) -> None:
        _survives(parse, text, allowed)

    run()


def test_the_fuzzed_parsers_cover_every_kind_of_text_capture_beside_the_repository() -> None:
    if not HARDWARE.exists():
        pytest.skip("the shared hardware captures are absent")
    kinds = {p.name.split("_", 1)[0] for p in HARDWARE.iterdir() if p.is_file() and "_" in p.name}
    covered = {pattern.split("_", 1)[0] for pattern, _, _ in PARSERS.values()}
    assert kinds <= covered, kinds - covered
