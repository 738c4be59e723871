"""A simulated fleet with one node in twenty silent, behind one bastion (issue 11, at suite size).

The full 2,048 nodes run in tests/benchmarks/bench_scale.py; here 60 nodes
with the same 5 % (3 silent nodes that accept TCP and never speak SSH) and a
bastion that lets only 3 handshakes through at once: were a silent node to
keep its slot, the three of them would stop everyone else.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from llmgw_core.fleet.fleet import Fleet
from llmgw_core.fleet.sim.fleet import scale_nodes, start_sim_fleet
from llmgw_core.fleet.ssh import SshConnector

BANNER_TIMEOUT_S = 20.0


@pytest.mark.slow
def test_silent_nodes_show_their_reason_and_the_healthy_ones_never_wait_for_them(tmp_path: Path):
    async def scenario() -> None:
        nodes = scale_nodes(racks=1, h100=30, mig=4, l40s=4, cpu=4, silent_every=20)
        assert len(nodes) == 60
        sim = await start_sim_fleet(
            tmp_path / "sim",
            nodes,
            pools=2,
            max_handshakes_per_bastion=3,
            banner_grace_s=0.5,
            banner_timeout_s=BANNER_TIMEOUT_S,
        )
        connector = SshConnector(sim.settings)
        fleet = Fleet(sim.inventory, connector)
        silent = set(sim.silent)
        assert len(silent) == 3
        try:
            await fleet.start()
            healthy_ready = await fleet.wait_for(
                lambda s: all(n.state == "ready" for n in s.nodes.values() if n.name not in silent),
                timeout_s=BANNER_TIMEOUT_S - 2,
            )
            # Every healthy node is in while the silent ones are still waiting for a banner.
            assert {healthy_ready.nodes[name].state for name in silent} == {"connecting"}
            assert connector.stats.peak_in_flight <= 3
            settled = await fleet.wait_settled(BANNER_TIMEOUT_S + 30)
        finally:
            await fleet.close()
            await sim.stop()
        assert settled.counts() == {"ready": 57, "unreachable": 3}
        for name in silent:
            reason = settled.nodes[name].reason or ""
            assert (
                f"accepted the connection but sent no SSH banner within {BANNER_TIMEOUT_S:g} s"
                in reason
            )
            assert "via 127.0.0.1:" in reason
        assert connector.stats.silent >= 3
        # The healthy ones answered with their own hardware: a tray, an H100 of a pod, a CPU node.
        tray = settled.nodes["gb200-r01-t01"].facts
        h100 = settled.nodes["h100-p3-0002"].facts
        cpu = settled.nodes["cpu-000"].facts
        assert tray is not None and h100 is not None and cpu is not None
        assert tray.host.hostname == "gb200-r01-t01"
        assert len(tray.gpus) == 4 and len(h100.gpus) == 8 and not cpu.gpus
        assert sim.inventory.node_spec("h100-p3-0002").fabrics[0].name == "ib-pod3"

    asyncio.run(scenario())


def test_scale_nodes_describes_2048_nodes_with_28_racks_and_one_in_twenty_silent():
    nodes = scale_nodes()
    assert len(nodes) == 2048
    assert len({n.labels["rack"] for n in nodes if n.profile == "gb200-tray"}) == 28
    assert sum(n.profile == "gb200-tray" for n in nodes) == 504
    assert {n.fabric for n in nodes if n.profile == "hgx-h100"} == {
        f"ib-pod{i}" for i in range(1, 5)
    }
    assert sum(n.silent for n in nodes) == 2048 // 20
    assert len({n.name for n in nodes}) == 2048
