"""The `clusters` step against a real Slurm, read through its login node over real SSH.

The login node is this machine behind asyncssh's server on loopback, its
sessions given the private cluster's `SLURM_CONF` as a site's login node has
its own; the console reaches it by an ~/.ssh/config alias, as the inventory's
`login` names it, with its host key in the inventory's known_hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from kept_demo import run_json
from live_walk import until
from ports import free_port
from slurm_cluster import SlurmCluster
from slurm_login import login_node
from textual.widgets import Static

from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import LiveFeed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@contextlib.contextmanager
def _login(
    tmp_path: Path, login_env: dict[str, str], more_clusters: str = ""
) -> Iterator[tuple[str, dict[str, str]]]:
    """The console's inventory with cluster `big` (partition gpu), then `more_clusters` (YAML
    list items), and its environment; the login node's sessions get `login_env`. The
    ~/.ssh/config also names `nowhere`, a login on a loopback port nothing listens on."""
    nowhere = f"Host nowhere\n  HostName 127.0.0.1\n  Port {free_port()}\n  IdentityFile IDENTITY\n"
    big = "  - name: big\n    slurm: {login: slurm-login, partition: gpu}\n"
    with login_node(tmp_path, login_env, big + more_clusters, nowhere) as found:
        yield found


def test_the_clusters_step_reads_the_partition_through_the_login_node(
    tmp_path: Path, slurm: SlurmCluster
):
    job = slurm.run(
        "sbatch", "--parsable", "--gres=gpu:h100:2", f"--output={tmp_path}/job.out",
        "--wrap=sleep 60",
    ).strip()  # fmt: skip

    def running() -> bool:
        return slurm.run("squeue", "-h", "-o", "%T", "-j", job).strip() == "RUNNING"

    slurm.wait_for("the job running", running)
    with _login(tmp_path, {"SLURM_CONF": str(slurm.conf)}) as (inventory, env):
        code, lines, said = run_json(inventory, "steps: [{clusters: {}}]", env=env)
    assert code == 0, said
    (cluster,) = lines[0]["result"]["clusters"]
    assert (cluster["cluster"], cluster["login"], cluster["partition"]) == (
        "big",
        "slurm-login",
        "gpu",
    )
    assert cluster["slurm"].startswith(("22.05.", "23.", "24.", "25."))
    nodes = {node["name"]: node for node in cluster["nodes"]}
    assert set(nodes) == {"h100-1", "h100-2", "a100-1"}  # the gpu partition; cpu-1 is not in it
    assert [(g["type"], g["count"]) for g in nodes["a100-1"]["gpus"]] == [("a100", 4)]
    # The job's two cards, on whichever h100 node Slurm gave it.
    assert sorted(nodes[n]["gpus_used"] for n in ("h100-1", "h100-2")) == [0, 2]
    assert all(node["states"][0] in ("IDLE", "MIXED") for node in nodes.values())


def test_a_cluster_not_in_the_inventory_and_a_login_without_its_slurm_are_one_sentence(
    tmp_path: Path, slurm: SlurmCluster
):
    # A login node without Slurm's commands (a host that is not the cluster's login node).
    with _login(tmp_path, {"PATH": "/nonexistent"}) as (inventory, env):
        code, lines, said = run_json(inventory, "steps: [{clusters: {name: small}}]", env=env)
        assert code == 2 and "Traceback" not in said
        assert lines[0]["error"].startswith("no cluster is named 'small' in the inventory")
        code, lines, said = run_json(inventory, "steps: [{clusters: {}}]", env=env)
    assert code != 0 and "Traceback" not in said, said
    error = lines[0]["error"]
    assert error.startswith("`scontrol --version` on big's login node slurm-login failed: ")
    assert "not found" in error
    assert "\n" not in error


def test_the_consoles_fleet_shows_the_clusters_nodes_and_anothers_job_and_a_dead_login_in_red(
    tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch
):
    """The console itself (Textual's pilot), pointed at the cluster's login node over SSH:
    under the nodes, cluster `big` with its three GPU nodes and the two cards another user's
    job holds; cluster `gone`, whose login does not answer, is its one sentence."""
    job = slurm.run(
        "sbatch", "--parsable", "--gres=gpu:h100:2", f"--output={tmp_path}/job.out",
        "--wrap=sleep 60",
    ).strip()  # fmt: skip
    slurm.wait_for(
        "the job running",
        lambda: slurm.run("squeue", "-h", "-o", "%T", "-j", job).strip() == "RUNNING",
    )
    gone = "  - name: gone\n    slurm: {login: nowhere, partition: gpu}\n"
    with _login(tmp_path, {"SLURM_CONF": str(slurm.conf)}, gone) as (inventory, env):
        monkeypatch.setenv("HOME", env["HOME"])
        asyncio.run(_watch_the_fleet(inventory, job))


async def _watch_the_fleet(inventory: str, job: str) -> None:
    app = LlmgwApp(LiveFeed(inventory=inventory, demo=False, refresh_s=1.0), animation="none")
    async with app.run_test(size=(140, 40)) as pilot:
        clusters = app.screen.query_one("#fleet-clusters", Static)

        def shown() -> str:
            return str(clusters.content)

        await until(pilot, lambda: "another job" in shown() and "gone" in shown(), "clusters", 60)
        text = shown()
        assert clusters.display
        assert (
            "big · partition gpu · Slurm " in text and "via slurm-login · 18/20 GPUs free" in text
        )
        for node in ("h100-1", "h100-2", "a100-1"):
            assert f"  {node}  " in text
        assert "cpu-1" not in text  # not in the gpu partition
        assert f"another job (job {job}, 2 cards)" in text
        (red,) = [line for line in text.splitlines() if line.startswith("gone")]
        assert red.startswith("gone via nowhere: ") and "cannot be reached" in red
        await pilot.press("q")


def test_a_plan_on_a_cluster_is_made_against_its_partition_and_an_unknown_cluster_is_refused(
    tmp_path: Path, slurm: SlurmCluster
):
    """`plan` with `cluster:` sizes the model on the partition as `serve` there would: the
    Serve wizard's ways on a Slurm place come from this."""
    script = (
        "steps:\n"
        "  - plan: {model: 'catalog:meta-llama/Llama-3.3-70B-Instruct', context: 8192,"
        " cluster: big}\n"
    )
    with _login(tmp_path, {"SLURM_CONF": str(slurm.conf)}) as (inventory, env):
        code, lines, said = run_json(inventory, script, env=env)
        assert code == 0, said
        body = lines[0]["result"]
        classes = {option["gpu_class"] for option in body["options"]}
        assert classes <= {"h100-80g", "a100-80g"} and classes, body["options"]
        code, lines, said = run_json(
            inventory, script.replace("cluster: big", "cluster: small"), env=env
        )
    assert code == 2 and "Traceback" not in said
    assert lines[0]["error"].startswith("no cluster is named 'small' in the inventory")
