"""GRES and TRES strings: every form Slurm prints reads back to the cards it stands for."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw_core.slurm.gres import GresCount, read_gres, read_tres, requested_per_node, tres_cards
from llmgw_core.slurm.text import SlurmOutputUnreadable


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("gpu:h100:8", (GresCount(name="gpu", type="h100", count=8),)),
        ("gpu:h100:8(S:0-1)", (GresCount(name="gpu", type="h100", count=8),)),
        ("gpu:4", (GresCount(name="gpu", count=4),)),
        ("gpu:h100:no_consume:8", (GresCount(name="gpu", type="h100", count=8),)),
        ("gpu:(null):0(IDX:N/A)", (GresCount(name="gpu", count=0),)),
        (
            "gpu:h100:2(IDX:0,3),nvme:1",
            (
                GresCount(name="gpu", type="h100", count=2, indices=(0, 3)),
                GresCount(name="nvme", count=1),
            ),
        ),
        (
            "gpu:a100:2(IDX:0-1),gpu:h100:1(IDX:4)",
            (
                GresCount(name="gpu", type="a100", count=2, indices=(0, 1)),
                GresCount(name="gpu", type="h100", count=1, indices=(4,)),
            ),
        ),
        ("bandwidth:lustre:4G", (GresCount(name="bandwidth", type="lustre", count=4 * 1024**3),)),
        ("(null)", ()),
    ],
)
def test_every_gres_form_reads_to_its_cards(written: str, read: tuple[GresCount, ...]):
    assert read_gres(written, "Gres") == read


@pytest.mark.parametrize(
    ("written", "count"),
    [
        ("gres:gpu:h100:8", 8),
        ("gres/gpu:h100=8", 8),
        ("gres/gpu=2", 2),
        ("gres/gpu:4", 4),
        ("gpu:l4:1", 1),
    ],
)
def test_a_job_s_request_reads_the_same_from_every_version(written: str, count: int):
    request = requested_per_node(written, "gpu", "TresPerNode")
    assert request is not None and request.count == count
    assert requested_per_node("gres/shard:2", "gpu", "TresPerNode") is None


def test_tres_counts_cards_only_where_the_site_tracks_them():
    assert (
        tres_cards(read_tres("cpu=8,mem=64G,gres/gpu=4,gres/gpu:h100=4", "AllocTRES"), "gpu", "x")
        == 4
    )
    assert tres_cards(read_tres("cpu=8,mem=64G", "AllocTRES"), "gpu", "x") is None
    with pytest.raises(SlurmOutputUnreadable):
        read_tres("cpu", "AllocTRES")


_word = st.text(alphabet="abcdefghxyz0123456789_", min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(
    entries=st.lists(
        st.tuples(
            _word,
            st.one_of(st.just(""), _word),
            st.integers(0, 64),
            st.lists(st.integers(0, 63), max_size=6, unique=True),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_gres_string_reads_back_to_what_was_written(entries):
    parts = []
    for name, kind, count, indices in entries:
        text = f"{name}:{kind}:{count}" if kind else f"{name}:{count}"
        if indices:
            text += f"(IDX:{','.join(str(index) for index in sorted(indices))})"
        parts.append(text)
    read = read_gres(",".join(parts), "Gres")
    assert [(e.name, e.type, e.count, set(e.indices)) for e in read] == [
        (name, kind, count, set(indices)) for name, kind, count, indices in entries
    ]
