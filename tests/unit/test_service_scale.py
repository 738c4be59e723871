"""When `keep` scales out and in, from readings over time (pure)."""

from __future__ import annotations

from llmgw_core.service.scale import Reading, Scaler
from llmgw_core.service.spec import ReplicaBounds


def _bounds(**given: object) -> ReplicaBounds:
    return ReplicaBounds.model_validate({"min": 1, "max": 3, "target_waiting": 2, **given})


def test_waiting_over_target_for_long_enough_scales_out_once_naming_the_signal():
    scaler = Scaler(_bounds(scale_up_after_s=10))
    busy = Reading(ready=1, waiting=4.6)
    assert scaler.step(0, busy, 1) is None
    assert scaler.step(9.5, busy, 1) is None
    decided = scaler.step(10, busy, 1)
    assert decided is not None and decided.direction == "out"
    assert decided.why == "4.6 requests waiting per replica > 2 for 10 s"
    assert scaler.step(11, busy, 2) is None  # the clock starts again with the new replica


def test_a_dip_below_target_restarts_the_clock():
    scaler = Scaler(_bounds(scale_up_after_s=10))
    assert scaler.step(0, Reading(1, 5), 1) is None
    assert scaler.step(6, Reading(1, 1.5), 1) is None
    assert scaler.step(12, Reading(1, 5), 1) is None
    assert scaler.step(21, Reading(1, 5), 1) is None
    assert scaler.step(22, Reading(1, 5), 1) is not None


def test_never_past_max_nor_below_min():
    scaler = Scaler(_bounds(scale_up_after_s=0, scale_down_after_s=0))
    assert scaler.step(0, Reading(3, 50), 3) is None
    assert scaler.step(1, Reading(1, 0), 1) is None


def test_quiet_below_half_the_targets_scales_in():
    scaler = Scaler(_bounds(target_kv=0.8, scale_down_after_s=15))
    quiet = Reading(ready=3, waiting=0.0, kv_use=0.1)
    assert scaler.step(0, quiet, 3) is None
    decided = scaler.step(15, quiet, 3)
    assert decided is not None and decided.direction == "in"
    assert (
        decided.why == "0 requests waiting per replica < 1 and KV cache 10% in use < 40% for 15 s"
    )
    # Half the KV target or more holds it.
    assert scaler.step(40, Reading(3, 0.0, 0.5), 3) is None


def test_kv_cache_over_target_scales_out_even_without_waiting():
    scaler = Scaler(_bounds(target_kv=0.8, scale_up_after_s=0))
    decided = scaler.step(0, Reading(ready=2, waiting=0, kv_use=0.86), 2)
    assert decided is not None and decided.why == "KV cache 86% in use > 80% for 0 s"


def test_no_ready_replica_decides_nothing_and_a_failed_read_does_not_restart_the_clock():
    scaler = Scaler(_bounds(scale_up_after_s=10))
    assert scaler.step(0, Reading(ready=0, waiting=0), 0) is None
    assert scaler.step(1, Reading(ready=1, waiting=5), 1) is None
    assert scaler.step(6, Reading(ready=0, waiting=0), 1) is None  # its engine did not answer
    decided = scaler.step(11, Reading(ready=1, waiting=5), 1)
    assert decided is not None and decided.why.endswith("for 10 s")


def test_time_to_first_token_over_its_target_scales_out_naming_it():
    scaler = Scaler(_bounds(target_waiting=None, target_ttft_p99_s=0.8, scale_up_after_s=5))
    slow = Reading(ready=1, waiting=0.0, ttft_p99=2.41)
    assert scaler.step(0, slow, 1) is None
    decided = scaler.step(5, slow, 1)
    assert decided is not None and decided.direction == "out"
    assert decided.why == "time to first token p99 2.4 s > 800 ms for 5 s"


def test_inter_token_latency_over_its_target_scales_out_and_quiet_latency_scales_in():
    scaler = Scaler(_bounds(target_itl_p99_s=0.05, scale_up_after_s=0, scale_down_after_s=10))
    decided = scaler.step(0, Reading(ready=2, waiting=0.0, itl_p99=0.075), 2)
    assert decided is not None and decided.why == "inter-token latency p99 75 ms > 50 ms for 0 s"
    assert scaler.step(1, Reading(ready=3, waiting=0.0, itl_p99=0.03), 3) is None  # not half
    assert scaler.step(2, Reading(ready=3, waiting=0.0, itl_p99=0.02), 3) is None
    decided = scaler.step(12, Reading(ready=3, waiting=0.0, itl_p99=None), 3)
    assert decided is not None and decided.direction == "in"
    assert decided.why == (
        "0 requests waiting per replica < 1 and no request measured the inter-token latency"
        " for 10 s"
    )


def test_a_service_must_scale_on_something():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="target_ttft_p99_s or target_itl_p99_s"):
        ReplicaBounds.model_validate({"max": 3, "target_waiting": None})
    for bad in (
        {"target_ttft_p99_s": 0},
        {"target_ttft_p99_s": float("nan")},
        {"target_itl_p99_s": -1},
        {"target_itl_p99_s": 61},
    ):
        with pytest.raises(ValidationError):
            ReplicaBounds.model_validate({"max": 3, **bad})
