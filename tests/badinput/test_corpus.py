"""The bad-input corpus: every case ends as it must, and none prints a traceback, hangs or leaks.

The corpus runs once per session (`corpus.run_all`, about a minute on two
cores); each case is then its own test, named by its id, so a failure says
which input broke which rule.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from corpus import SECRET, Result, figures, run_all
from generate import SHARED, cases

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SHARED.exists(), reason="the shared fixtures are absent"),
]

CASES = cases() if SHARED.exists() else []


@pytest.fixture(scope="session")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Result]]:
    by_id: dict[str, list[Result]] = {}
    for result in run_all(Path(tmp_path_factory.mktemp("badinput"))):
        by_id.setdefault(result.case.id, []).append(result)
    return by_id


def test_the_corpus_holds_at_least_300_cases_in_every_category():
    per_category = Counter(case.category for case in CASES)
    assert len(CASES) >= 300
    assert set(per_category) == {"script", "inventory", "model", "protocol", "capture", "injection"}
    assert min(per_category.values()) >= 30, per_category


def test_every_case_states_its_end_and_a_sentence_fragment():
    for case in CASES:
        assert case.expect in (0, 2) or isinstance(case.expect, str), case.id
        assert case.fragment or case.kind == "capture", case.id


@pytest.mark.parametrize("case_id", [case.id for case in CASES])
def test_a_bad_input_ends_in_its_one_sentence(results: dict[str, list[Result]], case_id: str):
    for result in results[case_id]:
        assert result.clean, result.why()


def test_no_traceback_no_hang_no_secret_and_the_agent_never_died(
    results: dict[str, list[Result]],
):
    every = [result for runs in results.values() for result in runs]
    totals = figures(every)
    assert totals["tracebacks"] == totals["hangs"] == totals["secret leaks"] == 0, totals
    assert totals["agent deaths"] == 0, totals
    assert not any(SECRET in result.output for result in every)
