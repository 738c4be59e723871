"""Every way the Serve a model wizard lists is a way `serve` starts (issue 35): headless here,
through the console's wizard in tests/tui/test_wizard_every_kind.py, on one kept demo fleet.

The wizard serves a way it listed with the `serve` step's own fields
(`serve.choice.way_layout`: the engine, the file, the card class, the cards
of each node, the nodes). Here the runner plans three models as the
wizard's first page does, then serves every listed way as a dry run (the
placement and the commands `serve` would start, so a way `serve` refuses
fails here) and brings one of each kind up to ready: one card, tensor
parallel inside a node, and every way of the 405B — pipeline parallel over
the H100 pair and over NVL72 trays.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kept_demo import kept_demo, run_json

from llmgw_core.serve.choice import way_layout

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ONE_CARD = "catalog:meta-llama/Llama-3.1-8B-Instruct"
ONE_NODE = "catalog:meta-llama/Llama-3.3-70B-Instruct"
SEVERAL_NODES = "catalog:meta-llama/Meta-Llama-3.1-405B"
MODELS = (ONE_CARD, ONE_NODE, SEVERAL_NODES)
SAME_WAY = ("engine", "artifact", "gpu_class", "cards_per_node", "nodes")
"""What makes a way the one listed (the plan's record and `serve`'s `way` share the keys)."""


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with kept_demo(tmp_path_factory.mktemp("ways") / "demo") as path:
        yield path


def listed_ways(inventory: str) -> dict[str, dict[str, Any]]:
    """Each model's plan as the wizard's first page makes it (its trained context, one
    sequence), by the runner against the fleet."""
    script = {"steps": [{"plan": {"model": model}} for model in MODELS]}
    code, lines, err = run_json(inventory, yaml.safe_dump(script))
    assert code == 0, err
    return {model: line["result"] for model, line in zip(MODELS, lines, strict=True)}


def wizard_fields(model: str, plan: dict[str, Any], way: dict[str, Any]) -> dict[str, Any]:
    """The `serve` fields the wizard gives for a way it listed (its context filled in)."""
    return {"model": model, "context": plan["context"], **way_layout(way)}


def same_way(served: dict[str, Any], listed: dict[str, Any]) -> bool:
    # The plan names a CPU node's class `cpu`; a served way has no card class there.
    listed = {**listed, "gpu_class": None} if listed.get("on_cpu") else listed
    return all(served.get(key) == listed.get(key) for key in SAME_WAY)


def kinds(plans: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """One card (the 8B), tensor parallel in a node (the 70B), and every way of the 405B."""
    one_card = next(w for w in plans[ONE_CARD]["options"] if w["cards"] == 1)
    in_a_node = next(w for w in plans[ONE_NODE]["options"] if w["nodes"] == 1 and w["cards"] > 1)
    return [
        (ONE_CARD, one_card),
        (ONE_NODE, in_a_node),
        *((SEVERAL_NODES, way) for way in plans[SEVERAL_NODES]["options"]),
    ]


def test_every_way_the_wizard_lists_is_placed_and_started_by_the_serve_step(inventory: str):
    plans = listed_ways(inventory)
    listed = [(model, way) for model in MODELS for way in plans[model]["options"]]
    several = [way for _, way in listed if way["nodes"] > 1]
    assert {w["gpu_class"] for w in several} >= {"h100-80g", "gb200-186g"}, (
        "the 405B must be listed over the H100 pair and over NVL72 trays"
    )

    steps: list[dict[str, Any]] = [
        {"serve": {**wizard_fields(m, plans[m], w), "name": f"dry-{i}", "dry_run": True}}
        for i, (m, w) in enumerate(listed)
    ]
    started = kinds(plans)
    for i, (model, way) in enumerate(started):
        name = f"way-{i}"
        steps.append({"serve": {**wizard_fields(model, plans[model], way), "name": name}})
        steps.append({"stop": {"replica": name}})
    code, lines, err = run_json(inventory, yaml.safe_dump({"steps": steps}), timeout=540)
    assert code == 0, err + "\n".join(str(line.get("error")) for line in lines)

    dry, served = lines[: len(listed)], lines[len(listed) :: 2]
    refused = [
        f"{way['label']} ({model}): {line.get('error') or line['result'].get('way')}"
        for line, (model, way) in zip(dry, listed, strict=True)
        if not (line["ok"] and same_way(line["result"]["way"], way))
    ]
    assert refused == [], "ways the wizard lists that serve would not start as listed"
    for line, (model, way) in zip(served, started, strict=True):
        result = line["result"]
        assert line["ok"] and result["phase"] == "ready", (way["label"], line.get("error"))
        assert same_way(result["way"], way), (model, way["label"], result["way"])
        nodes = {shard["node"] for shard in result["replica"]["shards"]}
        assert len(nodes) == way["nodes"], (way["label"], nodes)
    print(
        f"{len(listed)} ways listed for {len(MODELS)} models; "
        f"{len(started)} brought up to ready, {sum(w['nodes'] > 1 for _, w in started)} multi-node"
    )
