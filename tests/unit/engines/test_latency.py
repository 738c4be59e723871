"""Latency and throughput over a window, read from an engine's histograms as Prometheus reads them.

The sim's own histograms (vLLM's names and bounds) are the input where an
engine's text is needed: what it observes is known, so each percentile is.
"""

from __future__ import annotations

import math

import pytest

from llmgw_agent.sim.engine.latency import Latencies
from llmgw_core.engines.latency import (
    HISTOGRAMS,
    Histogram,
    Window,
    combined,
    read_histograms,
    scrape,
)

LABELS = 'model_name="m",engine="0"'


def _text(latencies: Latencies, prompt: int = 0, generated: int = 0) -> str:
    return (
        latencies.text(LABELS)
        + f"vllm:prompt_tokens_total{{{LABELS}}} {prompt}\n"
        + f"vllm:generation_tokens_total{{{LABELS}}} {generated}\n"
    )


def test_a_quantile_is_the_bucket_the_rank_falls_in_read_on_a_line():
    histogram = Histogram(((0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (math.inf, 40.0)), 40.0)
    assert histogram.quantile(0.25) == pytest.approx(0.1)  # rank 10: the first bound
    assert histogram.quantile(0.5) == pytest.approx(0.1 + 0.4 * (10 / 20))
    assert histogram.quantile(0.99) == pytest.approx(0.5 + 0.5 * (39.6 - 30) / 10)
    beyond = Histogram(((0.1, 1.0), (math.inf, 10.0)), 10.0)
    assert beyond.quantile(0.99) == 0.1  # in +Inf: the last finite bound, as Prometheus says
    assert Histogram((), 0.0).quantile(0.5) is None


def test_the_sims_histograms_read_back_as_what_it_observed():
    latencies = Latencies("vllm")
    for _ in range(99):
        latencies.request(queued_s=0.0, token_s=0.02, tokens=10)
    latencies.request(queued_s=3.0, token_s=0.02, tokens=10)  # one request queued for 3 s
    read = read_histograms(_text(latencies), tuple(HISTOGRAMS["vllm"].values()))
    ttft = read["vllm:time_to_first_token_seconds"]
    assert ttft.count == 100
    assert 0.01 < ttft.quantile(0.5) <= 0.02  # 20 ms falls in (0.01, 0.02]: read on a line
    assert 2.5 < ttft.quantile(0.999) <= 5.0
    itl = read["vllm:inter_token_latency_seconds"]
    assert itl.count == 900 and 0.01 < itl.quantile(0.99) <= 0.025


def test_a_window_sees_only_what_happened_in_it_and_its_token_rates():
    latencies = Latencies("vllm")
    window = Window(seconds=60)
    for _ in range(50):
        latencies.request(queued_s=4.0, token_s=0.02, tokens=5)  # a busy start, then quiet
    window.add(scrape(_text(latencies, 1000, 250), "vllm", at=0.0))
    assert window.latency() is None  # one scrape says nothing of a window
    for _ in range(20):
        latencies.request(queued_s=0.0, token_s=0.02, tokens=5)
    window.add(scrape(_text(latencies, 1400, 350), "vllm", at=10.0))
    figures = window.latency()
    assert figures is not None and figures.requests == 20
    assert figures.ttft_p99 is not None and figures.ttft_p99 <= 0.04  # the busy start is out
    assert figures.tokens_in_per_s == pytest.approx(40.0)
    assert figures.tokens_out_per_s == pytest.approx(10.0)
    # Seventy seconds on, the scrape at 0 s has left the window's start behind.
    window.add(scrape(_text(latencies, 1400, 350), "vllm", at=70.0))
    assert [s.at for s in window.scrapes] == [10.0, 70.0]
    assert window.latency().requests == 0


def test_a_restarted_engine_starts_its_window_anew_and_replicas_add_up():
    first, second = Latencies("vllm"), Latencies("vllm")
    a, b = Window(), Window()
    for window, latencies in ((a, first), (b, second)):
        window.add(scrape(_text(latencies), "vllm", at=0.0))
    for _ in range(10):
        first.request(0.0, 0.02, 3)
        second.request(2.0, 0.02, 3)
    a.add(scrape(_text(first, 30, 30), "vllm", at=5.0))
    b.add(scrape(_text(second, 60, 30), "vllm", at=5.0))
    both = combined([a, b])
    assert both is not None and both.requests == 20
    assert both.ttft_p50 is not None and both.ttft_p50 <= 0.04 < 1.5 < both.ttft_p99
    assert both.tokens_in_per_s == pytest.approx(18.0)
    a.add(scrape(_text(Latencies("vllm")), "vllm", at=6.0))  # counts back to zero: a restart
    assert len(a.scrapes) == 1 and a.latency() is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        'vllm:time_to_first_token_seconds_bucket{le="x"} 3\n',
        'vllm:time_to_first_token_seconds_bucket{le="0.1"} NaN\n',
        "vllm:time_to_first_token_seconds_bucket 4\n",
        "vllm:time_to_first_token_seconds_count{} -7\n",
        "\x00\xff garbage { } \n" * 50,
    ],
)
def test_odd_metrics_text_reads_as_nothing_or_what_it_plainly_says(text: str):
    window = Window()
    window.add(scrape(text, "vllm", at=0.0))
    window.add(scrape(text, "vllm", at=1.0))
    figures = window.latency()
    assert figures is None or figures.ttft_p99 is None


def test_llama_server_has_token_rates_and_no_percentiles():
    window = Window()
    window.add(
        scrape(
            "llamacpp:prompt_tokens_total 100\nllamacpp:tokens_predicted_total 10\n",
            "llama.cpp",
            at=0.0,
        )
    )
    window.add(
        scrape(
            "llamacpp:prompt_tokens_total 300\nllamacpp:tokens_predicted_total 60\n",
            "llama.cpp",
            at=2.0,
        )
    )
    figures = window.latency()
    assert figures is not None and figures.ttft_p99 is None and figures.requests is None
    assert (figures.tokens_in_per_s, figures.tokens_out_per_s) == (100.0, 25.0)
