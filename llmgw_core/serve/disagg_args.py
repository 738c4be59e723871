"""`disaggregation:` in a service document or a `serve`: prefill and decode workers apart.

```yaml
disaggregation:
  prefill: {replicas: 2, layout: {gpus: 4}}   # layout optional: the service's own when absent
  decode: {replicas: 2, layout: {gpus: 8}}
  # scale (for `keep`): prefill: {replicas: 1, scale: {min: 1, max: 4, target_ttft_p99_s: 1}}
  connector: nixl                             # vLLM: nixl | mooncake | lmcache; SGLang: mooncake | nixl
  allow_tcp: false                            # true: a transfer over TCP is placed (slowly) where no rail joins the sides
  workload: {input_tokens: 8000, output_tokens: 200, ttft_s: 2, itl_s: 0.05}   # for the advisor
```

or `disaggregation: auto` (with a `workload:` the mapping form: `{auto: true, workload: …}`):
the advisor (`planner.pd_ratio`) says whether splitting pays on this fleet and
which ratio. What the document alone can refuse is refused here: a side of
no replicas, an engine without a split, a connector the engine lacks, widths
the connector cannot pair. What needs the fleet (the installed release, the
rails) is refused when the fleet is known (`placement_pd`, `check_version`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from llmgw_core.arguments import StrictArgs
from llmgw_core.engines.disagg import CONNECTORS, check_pairing, connector_rule
from llmgw_core.errors import BadInput, shown_value
from llmgw_core.planner.pd_ratio import Workload
from llmgw_core.serve.bounds import ReplicaBounds

MAX_SIDE_REPLICAS = 64


class SideLayout(StrictArgs):
    """One side's own layout, where it differs from the service's: cards a node, nodes."""

    gpus: int | None = Field(default=None, ge=1, le=1024)
    nodes: int | None = Field(default=None, ge=1, le=4096)


SIDE_SIGNALS = {
    "prefill": ("target_waiting", "target_ttft_p99_s"),
    "decode": ("target_kv", "target_itl_p99_s"),
}
"""What each side is scaled on: prefill on the prompts waiting and the time to first token
(prompts are its work), decode on the KV cache in use and the time between tokens."""


class SideArgs(StrictArgs):
    """`prefill:` or `decode:`: how many workers of that side, how each is laid out, and how far
    `keep` may scale the side (`scale:`, on that side's own signals: `SIDE_SIGNALS`)."""

    replicas: int
    layout: SideLayout | None = None
    scale: ReplicaBounds | None = None

    @model_validator(mode="before")
    @classmethod
    def _a_mapping(cls, value: Any) -> Any:
        if not isinstance(value, dict | SideArgs):
            raise ValueError(f"is {shown_value(value)}: give {{replicas: N, layout?: {{gpus}}}}")
        return value

    @field_validator("replicas", mode="before")
    @classmethod
    def _at_least_one(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 1:
                raise ValueError(
                    f"is {value}: each side needs at least one replica (a ratio of zero"
                    " serves nothing; leave disaggregation out to serve without a split)"
                )
            if value > MAX_SIDE_REPLICAS:
                raise ValueError(f"is {value}: at most {MAX_SIDE_REPLICAS} a side")
        return value


class DisaggregationArgs(StrictArgs):
    """`disaggregation:` (see the module's docstring)."""

    auto: bool = False
    prefill: SideArgs | None = None
    decode: SideArgs | None = None
    connector: str | None = None
    allow_tcp: bool = False
    workload: Workload | None = None

    @field_validator("connector")
    @classmethod
    def _known_connector(cls, value: str | None) -> str | None:
        if value is not None and value not in CONNECTORS:
            raise ValueError(f"is {value!r}: give one of {', '.join(CONNECTORS)}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _auto_word(cls, value: Any) -> Any:
        if value == "auto":
            return {"auto": True}
        if not isinstance(value, dict | DisaggregationArgs):
            raise ValueError(
                f"is {shown_value(value)}: give auto, or {{prefill: {{replicas}},"
                " decode: {replicas}, connector?}"
            )
        return value

    @model_validator(mode="after")
    def _sides(self) -> DisaggregationArgs:
        if self.auto and (self.prefill or self.decode):
            raise ValueError("auto chooses the sides: give either auto or prefill and decode")
        if not self.auto and (self.prefill is None or self.decode is None):
            missing = "prefill" if self.prefill is None else "decode"
            raise ValueError(f"{missing} is missing: give both prefill and decode, or auto")
        sides = {}
        for role, side in (("prefill", self.prefill), ("decode", self.decode)):
            if side is not None and side.scale is not None:
                sides[role] = side.model_copy(update={"scale": side_bounds(role, side.scale)})
        return self.model_copy(update=sides) if sides else self

    def widths(self, service_gpus: int | None) -> tuple[int | None, int | None]:
        """Each side's tensor width (cards a node), its own layout's else the service's."""

        def width(side: SideArgs | None) -> int | None:
            own = side.layout.gpus if side and side.layout else None
            return own or service_gpus

        return width(self.prefill), width(self.decode)


def side_bounds(role: str, bounds: ReplicaBounds) -> ReplicaBounds:
    """A side's `scale:` on its own signals: another side's signal given is refused, and the
    waiting prompts a bound counts by default are no decode signal.

    Raises:
        ValueError: a signal of the other side, or none of this side's.
    """
    own = SIDE_SIGNALS[role]
    given = {name for name in bounds.model_fields_set if name.startswith("target_")}
    other = sorted(name for name in given - set(own) if getattr(bounds, name) is not None)
    if other:
        raise ValueError(
            f"{role}.scale: the {role} side scales on {' or '.join(own)}, not {', '.join(other)}"
        )
    cleared = {name: None for name in SIDE_SIGNALS["prefill"] + SIDE_SIGNALS["decode"]}
    kept = {name: getattr(bounds, name) for name in own}
    found = bounds.model_copy(update={**cleared, **kept})
    if all(getattr(found, name) is None for name in own):
        raise ValueError(f"{role}.scale: give {' or '.join(own)}: what to scale the side on")
    return found


def check_disaggregation(
    disaggregation: DisaggregationArgs, engine: str | None, gpus: int | None
) -> None:
    """What the document alone can refuse: the engine, its connector, the sides' widths.

    Raises:
        BadInput: one sentence, naming the fix.
    """
    rule = connector_rule(engine, disaggregation.connector)
    prefill_width, decode_width = disaggregation.widths(gpus)
    if prefill_width is not None and decode_width is not None:
        check_pairing(rule, prefill_width, decode_width)


def checked_in_model(
    disaggregation: DisaggregationArgs | None, engine: str | None, gpus: int | None
) -> None:
    """`check_disaggregation` inside a pydantic validator (a `ValueError` with the sentence)."""
    if disaggregation is None:
        return
    try:
        check_disaggregation(disaggregation, engine, gpus)
    except BadInput as exc:
        raise ValueError(exc.sentence()) from None
