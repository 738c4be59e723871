"""`replicas: {min, max, …}`: how far `keep` may scale a service, or one side of a split, and
on what signals (the service's document, `service.spec`, and a side's `scale:`,
`serve.disagg_args`, both take it)."""

from __future__ import annotations

from pydantic import Field, model_validator

from llmgw_core.arguments import StrictArgs

MAX_REPLICAS = 64


class ReplicaBounds(StrictArgs):
    """`replicas: {min, max, …}`: how far `keep` may scale the service, and on what signals.

    Out when the requests waiting per ready replica exceed `target_waiting`,
    the KV cache in use (the replicas' mean share) exceeds `target_kv`, or the
    replicas' p99 time to first token or inter-token latency over the last
    minute exceeds `target_ttft_p99_s` or `target_itl_p99_s`, for
    `scale_up_after_s`; in when every one given stays below half its target for
    `scale_down_after_s`.
    """

    min: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    max: int = Field(ge=1, le=MAX_REPLICAS)
    target_waiting: float | None = Field(default=4.0, gt=0, le=1_000_000)
    target_kv: float | None = Field(default=None, gt=0, le=1)
    target_ttft_p99_s: float | None = Field(default=None, gt=0, le=3600, allow_inf_nan=False)
    target_itl_p99_s: float | None = Field(default=None, gt=0, le=60, allow_inf_nan=False)
    scale_up_after_s: float = Field(default=10.0, ge=0, le=86_400)
    scale_down_after_s: float = Field(default=120.0, ge=0, le=86_400)

    @model_validator(mode="after")
    def _ordered(self) -> ReplicaBounds:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is more than max ({self.max})")
        targets = (self.target_waiting, self.target_kv, self.target_ttft_p99_s)
        if all(t is None for t in (*targets, self.target_itl_p99_s)):
            raise ValueError(
                "give target_waiting, target_kv, target_ttft_p99_s or target_itl_p99_s: "
                "what to scale on"
            )
        return self
