"""`explain` of a disaggregated service: where both sides would go, over what, and whether the
split pays (no I/O: it reads the fleet's snapshot and inventory the step already holds).

The sides are placed together (`placement_pd`), each node's release is held
to the connector (`engines.disagg.check_version`), and the advisor
(`planner.pd_ratio`) answers from the plan's way and the path placement
found: the rails' measured speed where a fabric test measured them between
the service's nodes, else their reported rate, NVLink's rated speed inside a
node or a domain. `disaggregation: auto` takes the advisor's ratio.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from llmgw_core.engines.disagg import check_version, connector_rule
from llmgw_core.engines.flags import checked_engine_args
from llmgw_core.engines.from_fleet import fabric_adapters
from llmgw_core.engines.programs import installed_version
from llmgw_core.errors import DoesNotFit
from llmgw_core.placement_pd import PdPlacement, PdRefused, PdWant, place_disaggregated
from llmgw_core.planner.card_rates import card_rate
from llmgw_core.planner.pd_ratio import Advice, advise_way
from llmgw_core.planner.pd_shape import split_shapes
from llmgw_core.serve.choice import Choice
from llmgw_core.serve.disagg_args import DisaggregationArgs, SideArgs

TCP_GBPS_ASSUMED = 10.0
"""The management network's speed the advisor assumes for a transfer allowed over TCP."""


@dataclass(frozen=True)
class PdExplained:
    """What `explain` says of a disaggregated service.

    Attributes:
        result: the `disaggregation` part of the step's JSON.
        refusal: the sentence when the sides cannot be placed together, else None.
    """

    result: dict[str, Any]
    refusal: str | None = None


def side_choice(choice: Choice, side: SideArgs | None) -> Choice:
    """The way one side's workers run: the service's, at the side's own width where it gives one
    (cards a node for tensor parallel, nodes for pipeline stages)."""
    layout = side.layout if side else None
    if layout is None:
        return choice
    gpus = layout.gpus or choice.cards_per_node
    nodes = layout.nodes or choice.nodes
    return replace(
        choice,
        cards_per_node=gpus,
        nodes=nodes,
        tensor_parallel=gpus,
        pipeline_parallel=nodes,
        label=f"{nodes} × {gpus} × {choice.gpu_class}"
        if nodes > 1
        else f"{gpus} × {choice.gpu_class}",
    )


def side_way(plan: Any, choice: Choice, side: SideArgs | None, role: str) -> Any:
    """The plan's way (`planner.way_record.Way`) one side runs: the choice's own, or the one of
    the side's width, so each side's cards are sized by the memory rules at that width.

    Raises:
        DoesNotFit: the side's width holds no way of the plan (the model does not fit it at
            this context), naming the widths that do.
    """
    wanted = side_choice(choice, side)
    ways = [
        w
        for w in (plan.options if plan is not None else ())
        if (w.engine, w.gpu_class, w.artifact) == (choice.engine, choice.gpu_class, choice.artifact)
    ]
    for way in ways:
        if (way.tensor_parallel, way.nodes) == (wanted.tensor_parallel, wanted.nodes):
            return way
    if plan is None or wanted is choice:
        return None
    layouts = sorted({(w.nodes, w.cards_per_node) for w in ways})
    fits = [f"{{gpus: {g}}}" if n == 1 else f"{{gpus: {g}, nodes: {n}}}" for n, g in layouts]
    raise DoesNotFit(
        f"disaggregation: {role}'s layout ({wanted.label}) does not hold the model at this context",
        "give it a layout the plan fits: " + (", ".join(fits) or f"none on {choice.gpu_class}"),
    )


def _path_speed(fleet: Any, placed: PdPlacement, gpu_class: str) -> tuple[float, str]:
    """The speed the advisor takes between the sides, Gb/s, and how it was found."""
    if placed.transport in ("node", "nvlink"):
        rate = card_rate(gpu_class)
        gbps = rate.nvlink_gbps if rate and rate.nvlink_gbps else 0.0
        if gbps:
            return gbps, f"NVLink ({gpu_class} rated)"
        return 64 * 8.0, "PCIe between the cards (64 GB/s assumed)"
    if placed.transport == "tcp":
        return (
            TCP_GBPS_ASSUMED,
            f"TCP on the management network ({TCP_GBPS_ASSUMED:.0f} Gb/s assumed)",
        )
    rails = max(len(r) for r in placed.rails.values())
    if placed.measured_gbps:
        return placed.measured_gbps, f"{rails} rails of {placed.interconnect}, measured"
    snapshot = fleet.snapshot()
    totals = []
    for node, adapters in placed.rails.items():
        facts = snapshot.nodes[node].facts
        rated = {a.name: a.rate_gbps or 0.0 for a in (facts.adapters if facts else ())}
        totals.append(sum(rated.get(a.name, 0.0) for a in adapters))
    return min(totals), f"{rails} rails of {placed.interconnect}, as reported (never tested)"


def transfer_facts(fleet: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each node's fabric adapters (the inventory's names, the node's link layers) and its
    kept fabric verdicts: what `placement_pd` places the transfer on."""
    specs = {s.name: s for s in fleet.inventory.node_specs()}
    adapters: dict[str, Any] = {}
    verdicts: dict[str, Any] = {}
    for name, state in fleet.snapshot().nodes.items():
        facts = state.facts
        spec = specs.get(name)
        if facts is None or spec is None:
            continue
        verdicts[name] = facts.rail_verdicts
        if spec.fabrics:
            adapters[name] = fabric_adapters(spec.fabrics[0].hcas, facts)
    return adapters, verdicts


def explain_disaggregation(
    fleet: Any,
    views: Any,
    args: Any,
    plan: Any,
    choice: Any,
    model: Any,
) -> PdExplained:
    """Both sides placed and the advice, for `explain` with `disaggregation:`.

    Args:
        fleet: the step's live fleet (its snapshot and inventory are read).
        views: every node as placement sees it.
        args: the step's arguments (`LayoutFields`, `disaggregation` set).
        plan: the plan the choice came from (each side's way is looked up there).
        choice: the way `serve` would take (`serve.choice.Choice`).
        model: the model (`ModelInfo`).

    Raises:
        BadInput: the connector is newer than a chosen node's release.
        DoesNotFit: a side's own width does not hold the model (`side_way`).
    """
    split: DisaggregationArgs = args.disaggregation
    rule = connector_rule(choice.engine, split.connector)
    prefill_way = side_way(plan, choice, split.prefill, "prefill")  # its width holds it too
    way = side_way(plan, choice, split.decode, "decode")
    shapes = split_shapes(
        choice.engine,
        {"prefill": prefill_way, "decode": way},
        context=plan.context if plan is not None else 0,
        workload=split.workload,
        engine_args=checked_engine_args(choice.engine, args.engine_args or {}),
        model_shape=model.any_shape,
    )
    models = tuple(x for x in (model.repo_id, model.ref) if x)
    prefill_want = side_choice(choice, split.prefill).want(models)
    decode_want = side_choice(choice, split.decode).want(models)
    shape = model.any_shape
    advice: Advice | None = None
    counts = (
        (split.prefill.replicas, split.decode.replicas) if split.prefill and split.decode else None
    )
    result: dict[str, Any] = {"connector": rule.connector, "engine_name": rule.engine_name}
    snapshot = fleet.snapshot()
    adapters, verdicts = transfer_facts(fleet)
    want = PdWant(
        prefill_want,
        decode_want,
        counts[0] if counts else 1,
        counts[1] if counts else 1,
        allow_tcp=split.allow_tcp,
    )
    placed = place_disaggregated(want, views, adapters, verdicts)
    if isinstance(placed, PdRefused):
        result["placed"] = False
        return PdExplained(result, placed.sentence(want))
    for node in placed.nodes:
        facts = snapshot.nodes[node].facts
        check_version(
            rule, installed_version(choice.engine, facts.engines) if facts else None, node
        )
    if split.workload is not None and way is not None and shape is not None:
        gbps, label = _path_speed(fleet, placed, way.gpu_class)
        prefill_width = prefill_want.cards_per_node if split.prefill else None
        advice = advise_way(
            shape,
            split.workload,
            way,
            transfer_gbps=gbps,
            transfer_label=label,
            prefill_width=prefill_width,
        )
    if counts is None and advice is not None:
        # auto: the advisor's ratio, placed again with it.
        want = replace(
            want, prefill_replicas=advice.prefill_replicas, decode_replicas=advice.decode_replicas
        )
        again = place_disaggregated(want, views, adapters, verdicts)
        if isinstance(again, PdRefused):
            result.update(placed=False, advice=advice.as_dict())
            return PdExplained(result, again.sentence(want))
        placed = again
    result.update(placed=True, **placed.as_dict())
    result["shapes"] = {role: shape.as_dict() for role, shape in shapes.items()}
    result["replicas"] = {"prefill": want.prefill_replicas, "decode": want.decode_replicas}
    if advice is not None:
        result["advice"] = advice.as_dict()
    elif split.workload is None:
        result["advice"] = None
        result["advice_needs"] = (
            "give disaggregation.workload {input_tokens, output_tokens, ttft_s, itl_s}"
            " for the advisor's answer"
        )
    return PdExplained(result)
