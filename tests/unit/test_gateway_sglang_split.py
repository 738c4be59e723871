"""Which workers the front is told to reach the SGLang way: an SGLang split's prefill workers
join with their bootstrap port (sglang-router's `--prefill URL PORT`), so the front sends their
model's requests to both sides at once; vLLM's workers and every decode worker join as before,
and keep the text that says what they serve, so upgrading llmgw re-adds no worker."""

from __future__ import annotations

from replica_stub import Replica

from llmgw_core.gateway.spec import Worker, served_text, sglang_bootstrap_port, wanted_workers


def _worker(name: str, engine: str, role: str, port: int) -> Replica:
    pd = {
        "role": role,
        "connector": "mooncake",
        "bootstrap_port": 8998 if role == "prefill" else None,
    }
    spec = {
        "head": "h100-a-01",
        "http_port": port,
        "served_name": "llama",
        "engine": engine,
        "pd": pd,
    }
    return Replica(name, "ready", spec)


def test_an_sglang_prefill_worker_joins_with_its_bootstrap_port_and_its_decode_worker_without():
    workers = wanted_workers(
        [
            _worker("pd-prefill-1", "sglang", "prefill", 8000),
            _worker("pd-decode-1", "sglang", "decode", 8001),
        ],
        "cpu-01",
        {"h100-a-01": "10.0.0.1"},
    )
    assert [(w.role, w.bootstrap_port) for w in workers] == [("prefill", 8998), ("decode", None)]
    assert workers[0].serves == '["llama", [], true, "prefill", 8998]'


def test_a_vllm_prefill_worker_joins_as_before_even_with_mooncakes_bootstrap_port():
    (worker,) = wanted_workers([_worker("pd-prefill-1", "vllm", "prefill", 8000)], "cpu-01", {})
    assert worker.bootstrap_port is None
    assert (
        worker.serves
        == served_text("llama", {}, True, "prefill")
        == '["llama", [], true, "prefill"]'
    )
    assert worker == Worker("http://h100-a-01:8000", "llama", "pd-prefill-1", role="prefill")


def test_a_bootstrap_port_that_is_no_port_number_is_not_passed_on():
    for port in (True, "8998", None):
        spec = {"engine": "sglang", "pd": {"role": "prefill", "bootstrap_port": port}}
        assert sglang_bootstrap_port(spec) is None
    assert sglang_bootstrap_port({"engine": "sglang"}) is None
