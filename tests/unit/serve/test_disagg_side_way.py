"""Each side of a split is sized by the memory rules at its own width: the plan's way of that
width, or a refusal naming the widths that hold the model."""

from __future__ import annotations

import pytest

from llmgw_core.catalog import catalog_model
from llmgw_core.errors import DoesNotFit
from llmgw_core.planner.plan import plan
from llmgw_core.planner.pools import described_fleet
from llmgw_core.serve.choice import Overrides, choices
from llmgw_core.serve.disagg_args import SideArgs
from llmgw_core.serve.disagg_explain import side_choice, side_way

LLAMA_70B = "catalog:meta-llama/Llama-3.3-70B-Instruct"
H100_PAIR = [{"name": "h100-a", "count": 2, "gpu": "h100-80g", "gpus": 8, "fabric": "ib-a"}]


@pytest.fixture(scope="module")
def planned():
    model = catalog_model(LLAMA_70B)
    fleet = described_fleet(H100_PAIR)
    the_plan = plan(model, fleet, format="safetensors", context=16384)
    choice = choices(the_plan, model, fleet, Overrides(engine="vllm"), fallbacks=0)[0]
    return the_plan, choice


def _side(gpus: int) -> SideArgs:
    return SideArgs.model_validate({"replicas": 1, "layout": {"gpus": gpus}})


def test_a_side_without_a_layout_runs_the_services_own_way(planned):
    the_plan, choice = planned
    way = side_way(the_plan, choice, None, "decode")
    assert (way.tensor_parallel, way.nodes) == (choice.tensor_parallel, choice.nodes) == (4, 1)


def test_a_wider_decode_side_is_sized_by_the_plans_eight_card_way(planned):
    the_plan, choice = planned
    way = side_way(the_plan, choice, _side(8), "decode")
    assert way.tensor_parallel == 8 and round(way.weights_gib, 1) == 16.5
    wider = side_choice(choice, _side(8))
    assert (wider.tensor_parallel, wider.cards_per_node, wider.label) == (8, 8, "8 × h100-80g")


def test_a_side_too_narrow_for_the_model_is_refused_naming_the_widths_that_hold_it(planned):
    the_plan, choice = planned
    with pytest.raises(DoesNotFit) as caught:
        side_way(the_plan, choice, _side(2), "prefill")
    assert caught.value.sentence() == (
        "disaggregation: prefill's layout (2 × h100-80g) does not hold the model at this"
        " context: give it a layout the plan fits: {gpus: 4}, {gpus: 8}, {gpus: 1, nodes: 2}"
    )
