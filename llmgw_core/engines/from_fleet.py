"""A node's part in a launch, read from its inventory entry and its facts (pure).

Placement says which cards, which fabric and which rank; the inventory
says which adapters make up that fabric and where the engines live; the
node's facts say what those cards and adapters are (class, compute
capability, MIG UUID, link layer, GID index), its management address and
interface, and the engine version installed.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmgw_core.engines import ray_cluster
from llmgw_core.engines.programs import engine_program, installed_version, named_by_inventory
from llmgw_core.engines.spec import FabricAdapter, LaunchGpu, LaunchNode
from llmgw_core.errors import BadInput
from llmgw_core.facts import Adapter, Gpu, NodeFacts
from llmgw_core.inventory import NodeSpec


def _gpu(facts_gpu: Gpu, facts: NodeFacts) -> LaunchGpu:
    card = next((c for c in facts.cards if c.index == facts_gpu.card_index), None)
    capability = facts_gpu.compute_capability or (card.compute_capability if card else None)
    return LaunchGpu(
        id=str(facts_gpu.id),
        card_index=facts_gpu.card_index,
        gpu_class=facts_gpu.gpu_class,
        name=facts_gpu.name or (card.name if card else ""),
        uuid=facts_gpu.uuid,
        mig_profile=facts_gpu.mig_profile,
        compute_capability=capability,
    )


def _adapter(hca: str, reported: Sequence[Adapter]) -> FabricAdapter:
    name, _, port_text = hca.partition(":")
    port = int(port_text) if port_text.isdigit() else None
    for adapter in reported:
        if adapter.name == name and (port is None or adapter.port == port):
            return FabricAdapter(
                name=name,
                port=adapter.port,
                link_layer=adapter.link_layer,
                gid_index=adapter.gid_index,
            )
    return FabricAdapter(name=name, port=port or 1)


def fabric_adapters(hcas: Sequence[str], facts: NodeFacts) -> tuple[FabricAdapter, ...]:
    """A fabric's adapters on a node, as the inventory names them (`mlx5_0`, `mlx5_4:2`) and
    the node reports them (port, link layer, GID index): NCCL's and the KV transfer's rails."""
    return tuple(_adapter(hca, facts.adapters) for hca in hcas)


def launch_node(
    spec: NodeSpec,
    facts: NodeFacts,
    *,
    engine: str,
    rank: int,
    gpu_ids: Sequence[str | int],
    http_port: int,
    fabric: str | None = None,
    nvlink_domain: str | None = None,
    left_out: frozenset[str] = frozenset(),
) -> LaunchNode:
    """The node as a launch needs it.

    Args:
        spec: the node's inventory entry (defaults applied).
        facts: what the node reported.
        engine: the engine launched (its program and version are looked up).
        rank: the node's rank in the replica.
        gpu_ids: the claim ids placement chose ("3", "1102"); empty on a CPU way.
        http_port: the port its engine listens on.
        fabric: the replica's fabric, by its inventory name; None for none.
        nvlink_domain: the multi-node NVLink domain the replica is placed inside.
        left_out: the fabric's adapters this node does not use (a rail whose
            last fabric test failed: `fabric.rails.choose_rails`).

    Raises:
        BadInput: a card the node does not have, or a fabric it is not on.
    """
    by_id = {str(gpu.id): gpu for gpu in facts.gpus}
    gpus: list[LaunchGpu] = []
    for gpu_id in gpu_ids:
        found = by_id.get(str(gpu_id))
        if found is None:
            have = ", ".join(by_id) or "none"
            raise BadInput(f"{spec.name} has no GPU {gpu_id} (it has {have})")
        gpus.append(_gpu(found, facts))
    adapters: tuple[FabricAdapter, ...] = ()
    if fabric is not None:
        wired = next((f for f in spec.fabrics if f.name == fabric), None)
        if wired is None:
            on = ", ".join(f.name for f in spec.fabrics) or "no fabric"
            raise BadInput(f"{spec.name} is not on fabric {fabric} (the inventory puts it on {on})")
        adapters = tuple(a for a in fabric_adapters(wired.hcas, facts) if a.name not in left_out)
    replayed = spec.replay is not None
    # A replayed node runs the sim engine, except an engine its inventory entry names: that
    # one runs for real on this machine (the demo's CPU node with a real vLLM), whose network
    # is not the capture's (no `eno1` to bind Gloo to, no 10.0.0.x address).
    real_here = replayed and named_by_inventory(engine, spec.engines)
    return LaunchNode(
        name=spec.name,
        rank=rank,
        address="127.0.0.1" if real_here else facts.host.mgmt_address or spec.host,
        interface=None if real_here else spec.mgmt_interface or facts.host.mgmt_interface,
        gpus=tuple(gpus),
        adapters=adapters,
        fabric=fabric,
        nvlink_domain=nvlink_domain,
        http_port=http_port,
        engine_version=installed_version(engine, facts.engines),
        ray_version=installed_version(ray_cluster.REPORTED_AS, facts.engines),
        program=engine_program(engine, spec.engines, facts.engines),
        replayed=replayed,
        simulated=replayed and not real_here,
        bind=engine_bind(spec, facts),
    )


def engine_bind(spec: NodeSpec, facts: NodeFacts) -> str:
    """The address a node's engines listen on: the inventory's `engine_bind`, else the
    management address, so a shared node's other networks never reach them.

    A replayed node's sim engines live on this machine's loopback; a management
    address that is a name, or none, leaves every address (`0.0.0.0`).
    """
    if spec.engine_bind:
        return spec.engine_bind
    if spec.replay is not None:
        return "127.0.0.1"
    import ipaddress

    try:
        return str(ipaddress.ip_address(facts.host.mgmt_address or ""))
    except ValueError:
        return "0.0.0.0"
