"""SVG snapshots of every console screen on the demo fleet (facts built offline, no clocks)."""

from __future__ import annotations

from textual.pilot import Pilot


async def settle(pilot: Pilot) -> None:
    """Let the one-shot fleet poll land and the tables measure their columns."""
    await pilot.app.workers.wait_for_complete()
    for _ in range(3):
        await pilot.pause()


def test_the_fleet_screen_lists_every_demo_node_at_120x40(snap_compare, make_app):
    """Fleet: 23 demo nodes, free/total by class, ib-a fabric, the NVL72 domain."""
    assert snap_compare(make_app(), run_before=settle, terminal_size=(120, 40))


def test_the_fleet_screen_fits_80x24(snap_compare, make_app):
    """Fleet on a small terminal."""
    assert snap_compare(make_app(), run_before=settle, terminal_size=(80, 24))


def test_the_fleet_filtered_to_h100(snap_compare, make_app):
    """`/h100`: only the two HGX nodes remain."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("slash", *"h100", "enter")
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=(120, 40))


def test_the_node_page_of_an_hgx_h100(snap_compare, make_app):
    """Node page: 8 H100 cards, the NV18 matrix, NUMA and nearest NIC, 8 IB rails."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=(120, 40))


def test_the_node_page_of_the_a100_with_mig(snap_compare, make_app):
    """Node page: MIG instances as card/migN beside whole cards."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.app.run_action("open_node('a100-mig-01')")
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=(120, 40))


def test_the_node_page_of_a_gb200_tray(snap_compare, make_app):
    """Node page: a GB200 tray in its NVLink domain with IMEX up."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.app.run_action("open_node('gb200-r1-t01')")
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=(120, 40))


def test_the_racks_screen_draws_the_nvl72_with_one_degraded_and_one_not_joined_tray(
    snap_compare, make_app
):
    """Racks: the switch band, 18 trays, t07 amber, t13 red with its reason, islands."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=(120, 40))


def test_the_help_screen_lists_the_fleet_keys(snap_compare, make_app):
    """`?` over the fleet."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=(120, 40))


def test_command_mode_shows_an_unknown_command_in_red(snap_compare, make_app):
    """`:frobnicate` leaves the command line open with a red line naming the known commands."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("colon", *"frobnicate", "enter")
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=(120, 40))


def test_the_node_page_of_the_tray_that_has_not_joined_says_why(snap_compare, make_app):
    """Node page: gb200-r1-t13, every card's fabric not joined, the reason in the summary."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.app.run_action("open_node('gb200-r1-t13')")
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=(120, 40))


def test_the_plan_of_llama_3_3_70b_on_the_demo_fleet(snap_compare, make_app):
    """Plan: every file, the best way with its per-card bar, every way, the command."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("colon", *"plan catalog:meta-llama/Llama-3.3-70B-Instruct", "enter")
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=(120, 40))


def test_the_racks_screen_fits_80x24(snap_compare, make_app):
    """Racks on a small terminal: the rack scrolls, the trays keep their states."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=(80, 24))


def test_the_replicas_screen_shows_a_two_node_replica_and_its_shards(snap_compare, replica_app):
    """Replicas: llama-405b ready on two HGX nodes, rank by rank."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)

    assert snap_compare(replica_app(), run_before=run_before, terminal_size=(120, 40))


def test_the_replicas_screen_fits_80x24(snap_compare, replica_app):
    """Replicas on a small terminal."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)

    assert snap_compare(replica_app(), run_before=run_before, terminal_size=(80, 24))


async def _open_logs(pilot: Pilot) -> None:
    await settle(pilot)
    await pilot.press("colon", *"logs llama-405b", "enter")
    await settle(pilot)
    for _ in range(5):
        await pilot.pause(0.1)


def test_the_logs_screen_merges_both_ranks_and_shouts_about_net_socket(snap_compare, replica_app):
    """Logs: a real NCCL run that fell back to NET/Socket, both ranks prefixed, the red banner."""
    assert snap_compare(replica_app(), run_before=_open_logs, terminal_size=(120, 40))


def test_the_logs_screen_fits_80x24(snap_compare, replica_app):
    """Logs on a small terminal."""
    assert snap_compare(replica_app(), run_before=_open_logs, terminal_size=(80, 24))


def test_the_serve_wizard_ways_page(snap_compare, make_app):
    """Serve: Llama 3.3 70B planned on the demo fleet, every way with its per-card figure."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("5", *"catalog:meta-llama/Llama-3.3-70B-Instruct", "enter")
        for _ in range(50):
            await pilot.pause(0.1)
            if pilot.app.screen.step == "way":
                break
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=(120, 40))


def test_the_doctor_of_the_whole_demo_fleet_worst_first(snap_compare, make_app):
    """Doctor: every demo node's checks, FAIL rows first, each with its fix."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("colon", *"doctor", "enter")
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=(120, 40))


def test_the_fabric_test_of_the_two_h100_nodes_fails_the_degraded_rail(snap_compare, fabric_app):
    """Fabric: eight rails of ib-a, seven passing at 97 %, mlx5_5 failing at 60 %."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("colon", *"fabric h100-a-01 h100-a-02", "enter")
        await settle(pilot)

    assert snap_compare(fabric_app(), run_before=run_before, terminal_size=(120, 40))
