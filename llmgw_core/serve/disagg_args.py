"""`disaggregation:` in a service document or a `serve`: prefill and decode workers apart.

```yaml
disaggregation:
  prefill: {replicas: 2, layout: {gpus: 4}}   # layout optional: the service's own when absent
  decode: {replicas: 2, layout: {gpus: 8}}
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

MAX_SIDE_REPLICAS = 64


class SideLayout(StrictArgs):
    """One side's own layout, where it differs from the service's: cards a node, nodes."""

    gpus: int | None = Field(default=None, ge=1, le=1024)
    nodes: int | None = Field(default=None, ge=1, le=4096)


class SideArgs(StrictArgs):
    """`prefill:` or `decode:`: how many workers of that side, and how each is laid out."""

    replicas: int
    layout: SideLayout | None = None

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
        return self

    def widths(self, service_gpus: int | None) -> tuple[int | None, int | None]:
        """Each side's tensor width (cards a node), its own layout's else the service's."""

        def width(side: SideArgs | None) -> int | None:
            own = side.layout.gpus if side and side.layout else None
            return own or service_gpus

        return width(self.prefill), width(self.decode)


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
