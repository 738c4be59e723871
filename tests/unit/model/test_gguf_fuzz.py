"""A damaged GGUF header ends in one BadInput sentence (or a shape), never a traceback."""

from __future__ import annotations

import pytest
from header_ggufs import write_tiny_llama
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgw_core.errors import BadInput
from llmgw_core.model.gguf_header import read_gguf_header, shape_from_gguf


@pytest.fixture(scope="module")
def header_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = write_tiny_llama(tmp_path_factory.mktemp("gguf") / "fuzz.gguf", vocab=300)
    whole = path.read_bytes()
    header = read_gguf_header(lambda o, n: whole[o : o + n])
    return whole[: header.data_offset]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=6)
)
def test_a_damaged_header_is_a_shape_or_a_sentence(header_bytes, flips):
    damaged = bytearray(header_bytes)
    for offset, value in flips:
        damaged[offset % len(damaged)] = value
    data = bytes(damaged)

    def read(offset: int, length: int) -> bytes:
        return data[offset : offset + length]

    try:
        header = read_gguf_header(read, where="fuzz.gguf")
        shape = shape_from_gguf(header, where="fuzz.gguf")
    except BadInput as exc:
        assert exc.sentence().startswith("fuzz.gguf")
        return
    assert shape.num_layers >= 1


def test_the_undamaged_header_reads(header_bytes):
    header = read_gguf_header(lambda o, n: header_bytes[o : o + n], where="ok.gguf")
    assert shape_from_gguf(header).vocab_size == 300
