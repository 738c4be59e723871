"""Slurm's host lists, both ways: every list Slurm can write is expanded to its names in
order, `hostlist_text` writes one back that expands to the same set, and a malformed or
hostile list is one sentence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw_core.errors import BadInput
from llmgw_core.slurm.hostlist import MAX_HOSTS, expand_hostlist, hostlist_text
from llmgw_core.slurm.text import SlurmOutputUnreadable


@pytest.mark.parametrize(
    ("written", "names"),
    [
        ("h100-1", ["h100-1"]),
        ("node[1-3,5]", ["node1", "node2", "node3", "node5"]),
        ("gpu[08-11]", ["gpu08", "gpu09", "gpu10", "gpu11"]),
        ("a100-1,h100-[1-2]", ["a100-1", "h100-1", "h100-2"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("tray[001-002]-gb200", ["tray001-gb200", "tray002-gb200"]),
        ("", []),
        ("(null)", []),
    ],
)
def test_a_host_list_is_expanded_in_the_order_written(written: str, names: list[str]):
    assert expand_hostlist(written) == names


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("node[1-3", "leaves a bracket open"),
        ("node1-3]", "closes a bracket it never opened"),
        ("node[[1]]", "nests a bracket"),
        ("node[3-1]", "backwards range"),
        ("node[a-b]", "not a number or two joined by '-'"),
        ("node[1-2:2]", "not a number or two joined by '-'"),
        ("node1,,node2", "holds an empty name"),
        ("node;rm -rf /", "not a host name"),
        ("$(reboot)", "not a host name"),
        ("node[0-999999999]", f"more than {MAX_HOSTS:,} hosts"),
        ("a[0-999]b[0-999]", f"more than {MAX_HOSTS:,} hosts"),
    ],
)
def test_a_malformed_or_hostile_host_list_is_one_sentence(written: str, said: str):
    with pytest.raises(SlurmOutputUnreadable) as caught:
        expand_hostlist(written, "NodeList")
    assert said in caught.value.sentence()
    assert isinstance(caught.value, BadInput) and isinstance(caught.value, ValueError)
    assert caught.value.exit_code == 2 and "\n" not in caught.value.sentence()


def test_written_back_runs_fold_into_ranges_and_padding_is_kept():
    assert hostlist_text(["h100-1", "h100-2", "h100-3", "h100-5", "cpu-1"]) == "h100-[1-3,5],cpu-1"
    assert hostlist_text(["gpu08", "gpu09", "gpu10"]) == "gpu[08-10]"
    assert hostlist_text(["login"]) == "login"


_prefix = st.text(alphabet="abcxyz-", min_size=1, max_size=4).filter(lambda p: not p[-1].isdigit())
_range = st.tuples(st.integers(0, 300), st.integers(0, 12), st.integers(0, 3))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_prefix, st.lists(_range, min_size=1, max_size=4)), min_size=1, max_size=4)
)
def test_any_list_slurm_could_write_expands_to_the_names_it_stands_for(items):
    written, expected = [], []
    for prefix, ranges in items:
        pieces = []
        for low, span, width in ranges:
            high = low + span
            pieces.append(f"{low:0{width}d}" if span == 0 else f"{low:0{width}d}-{high:0{width}d}")
            pad = width if f"{low:0{width}d}".startswith("0") else 0
            expected += [f"{prefix}{number:0{pad}d}" for number in range(low, high + 1)]
        written.append(f"{prefix}[{','.join(pieces)}]")
    assert expand_hostlist(",".join(written)) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_prefix, st.integers(0, 2000), st.sampled_from([0, 2, 3])), max_size=40))
def test_written_back_holds_exactly_the_same_names(picked):
    names = [f"{prefix}{number:0{width}d}" for prefix, number, width in picked]
    assert set(expand_hostlist(hostlist_text(names))) == set(names)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=40))
def test_any_text_is_names_or_one_sentence_never_a_traceback(text: str):
    try:
        names = expand_hostlist(text)
    except SlurmOutputUnreadable as refusal:
        assert refusal.sentence() and "\n" not in refusal.sentence()
    else:
        assert len(names) <= MAX_HOSTS
