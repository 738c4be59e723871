"""A key's limits at the front, and the tokens read from the engines' own usage.

The limits are held to their arithmetic with the clock given (a bucket of
requests, a window of tokens, a budget per UTC day or month, requests at
once); the usage reader to the streams vLLM, SGLang and llama.cpp send, with
and without the usage the client asked for.
"""

from __future__ import annotations

import calendar
import json
import os
from pathlib import Path

import pytest

from llmgw_agent.front.quota import KeyQuota, Quotas, next_period_s, period_of
from llmgw_agent.front.usage import StreamUsage, ask_for_usage, whole_usage

NOON = calendar.timegm((2026, 12, 6, 12, 0, 0))


def test_requests_per_second_is_a_bucket_refilled_at_that_rate():
    quota = KeyQuota({"requests_per_s": 2})
    assert [quota.admit(0.0, NOON) for _ in range(2)] == [None, None]  # a burst of two
    refused = quota.admit(0.0, NOON)
    assert refused is not None and refused.limit == "requests_per_s"
    assert refused.retry_after_s == 1  # half a second, in whole seconds as Retry-After is
    assert refused.kind == "rate_limit_exceeded"
    assert quota.admit(0.4, NOON) is not None
    assert quota.admit(0.5, NOON) is None  # one request back after 1/2 s
    assert quota.in_flight == 3


def test_a_slow_rate_holds_one_request_and_says_when_the_next_may_come():
    quota = KeyQuota({"requests_per_s": 0.1})
    assert quota.admit(0.0, NOON) is None
    refused = quota.admit(1.0, NOON)
    assert refused is not None and refused.retry_after_s == 9


def test_requests_at_once_count_what_is_in_flight():
    quota = KeyQuota({"concurrent": 2})
    assert quota.admit(0.0, NOON) is None and quota.admit(0.0, NOON) is None
    refused = quota.admit(0.0, NOON)
    assert refused is not None and refused.limit == "concurrent"
    quota.in_flight -= 1  # one ended
    assert quota.admit(0.0, NOON) is None


def test_tokens_per_minute_refuse_until_the_window_has_moved_on():
    quota = KeyQuota({"tokens_per_min": 100})
    assert quota.admit(0.0, NOON) is None
    quota.spent(60, 0.0, NOON)
    assert quota.admit(10.0, NOON) is None  # 60 of 100: one more may go
    quota.spent(50, 10.0, NOON)
    refused = quota.admit(20.0, NOON)
    assert refused is not None and refused.limit == "tokens_per_min"
    assert refused.retry_after_s == 40  # the first 60 leave the window at 60 s
    assert "limit 100, used 110" in refused.message
    assert quota.admit(60.0, NOON) is None  # 50 left in the window


def test_a_budget_is_refused_once_used_and_renews_with_the_utc_day():
    quota = KeyQuota({"budget_tokens": 1000, "budget_per": "day"})
    assert quota.admit(0.0, NOON) is None
    quota.spent(1200, 0.0, NOON)  # an answer may take it past: the next is refused
    refused = quota.admit(1.0, NOON)
    assert refused is not None and refused.limit == "budget"
    assert refused.kind == "insufficient_quota"
    assert refused.retry_after_s == 12 * 3600  # midnight UTC
    assert "1200 used" in refused.message
    assert quota.admit(2.0, NOON + 12 * 3600) is None  # a new day


def test_periods_and_their_ends_are_utc_days_and_months_through_the_years_end():
    new_years_eve = calendar.timegm((2026, 12, 31, 23, 0, 0))
    assert period_of("day", new_years_eve) == "2026-12-31"
    assert period_of("month", new_years_eve) == "2026-12"
    assert next_period_s("day", new_years_eve) == 3600
    assert next_period_s("month", new_years_eve) == 3600
    assert next_period_s("month", calendar.timegm((2027, 2, 28, 0, 0, 0))) == 24 * 3600


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        ({"requests_per_s": -1}, "requests_per_s must be a positive number"),
        ({"requests_per_s": float("nan")}, "requests_per_s must be a positive number"),
        ({"concurrent": 1.5}, "concurrent must be a positive whole number"),
        ({"tokens_per_min": "100"}, "tokens_per_min is not a number"),
        ({"budget_tokens": True}, "budget_tokens is not a number"),
        ({"budget_tokens": 5, "budget_per": "week"}, "budget_per is day or month"),
    ],
)
def test_limits_the_front_cannot_keep_are_refused_naming_the_key(limits: dict, said: str):
    with pytest.raises(ValueError, match=f"the limits of key team: {said}"):
        Quotas({"team": limits})


def test_budgets_outlive_the_front_in_a_file_only_its_user_reads(tmp_path: Path):
    store = tmp_path / "front.json"
    quotas = Quotas({"team": {"budget_tokens": 100}, "free": {"requests_per_s": 5}}, store)
    assert quotas.admit("team") is None and quotas.admit("nobody") is None
    quotas.finished("team", 70)
    quotas.finished("nobody", 10)  # a key without limits: nothing kept
    quotas.save()
    assert os.stat(store).st_mode & 0o777 == 0o600
    kept = json.loads(store.read_text())
    assert list(kept) == ["team"] and kept["team"]["used"] == 70

    again = Quotas({"team": {"budget_tokens": 100}}, store)
    assert again.admit("team") is None
    again.finished("team", 40)
    refused = again.admit("team")
    assert refused is not None and refused.limit == "budget"


def test_a_damaged_or_old_store_starts_the_budgets_from_nothing(tmp_path: Path):
    store = tmp_path / "front.json"
    for text in (
        "{not json",
        "[]",
        '{"team": {"period": "1999-01-01", "used": 500}}',
        '{"team": {"period": 7, "used": -3}}',
    ):
        store.write_text(text)
        quotas = Quotas({"team": {"budget_tokens": 100}}, store)
        assert quotas.budgets()[0][2] == 0, text


def _sse(*chunks: dict) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + (
        b"data: [DONE]\n\n"
    )


CHUNKS = (
    {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hel"}}], "usage": None},
    {"id": "c1", "choices": [{"index": 0, "delta": {"content": "lo"}}], "usage": None},
    {"id": "c1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}},
)


def test_a_stream_with_the_usage_asked_for_is_read_and_passed_on_as_it_came():
    stream = _sse(*CHUNKS)
    usage = StreamUsage(strip=False)
    passed = b"".join(usage.feed(stream[i : i + 7]) for i in range(0, len(stream), 7))
    assert passed == stream and usage.tokens == (9, 2)


def test_usage_the_client_did_not_ask_for_is_taken_out_of_the_stream_again():
    stream = _sse(*CHUNKS)
    usage = StreamUsage(strip=True)
    passed = b"".join(usage.feed(stream[i : i + 5]) for i in range(0, len(stream), 5))
    passed += usage.end()
    assert usage.tokens == (9, 2)
    events = [e for e in passed.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    parsed = [json.loads(e[len(b"data: ") :]) for e in events[:-1]]
    assert [p["choices"][0]["delta"]["content"] for p in parsed] == ["Hel", "lo"]
    assert all("usage" not in p for p in parsed)


def test_llama_cpps_last_chunk_keeps_its_choice_and_loses_only_the_usage():
    last = {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7},
        "timings": {"predicted_n": 3},
    }
    stream = _sse(last).replace(b"\n\n", b"\r\n\r\n")  # a server that ends lines with CRLF
    usage = StreamUsage(strip=True)
    passed = usage.feed(stream) + usage.end()
    assert usage.tokens == (4, 3)
    first = json.loads(passed.split(b"\r\n\r\n")[0][len(b"data: ") :])
    assert first["choices"][0]["finish_reason"] == "stop" and "usage" not in first
    assert first["timings"] == {"predicted_n": 3}


def test_hostile_usage_is_not_counted():
    for usage in (
        {"prompt_tokens": -5, "completion_tokens": 1},
        {"prompt_tokens": True},
        {"prompt_tokens": "9"},
        [1, 2],
        "many",
    ):
        body = json.dumps({"choices": [], "usage": usage}).encode()
        assert whole_usage(body) is None, usage
        reader = StreamUsage(strip=False)
        reader.feed(b"data: " + body + b"\n\n")
        assert reader.tokens is None, usage
    assert whole_usage(b'{"usage": {"prompt_tokens": 3, "completion_tokens": 4}}') == (3, 4)
    assert whole_usage(b'not json with "usage"') is None


def test_the_front_asks_for_usage_only_for_a_stream_that_did_not():
    plain = json.dumps({"model": "m", "messages": []}).encode()
    assert ask_for_usage(plain) == (plain, False)
    asked = json.dumps({"stream": True, "stream_options": {"include_usage": True}}).encode()
    assert ask_for_usage(asked) == (asked, False)
    body, added = ask_for_usage(json.dumps({"stream": True, "n": 2}).encode())
    assert added and json.loads(body) == {
        "stream": True,
        "n": 2,
        "stream_options": {"include_usage": True},
    }
    body, added = ask_for_usage(
        json.dumps({"stream": True, "stream_options": {"continuous_usage_stats": False}}).encode()
    )
    assert added and json.loads(body)["stream_options"] == {
        "continuous_usage_stats": False,
        "include_usage": True,
    }
    for odd in (b"\xff\xfe", b"[1]", b'{"stream": true, "stream_options": 5}'):
        assert ask_for_usage(odd) == (odd, False)
