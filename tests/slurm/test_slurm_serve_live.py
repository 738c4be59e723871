"""A replica as a Slurm job, end to end: served through the login node on the suite's cluster,
asked through a gateway, listed with its job, and stopped with nothing left in the queue.

The console talks to the login node only (asyncssh's server on loopback, its sessions given
the cluster's `SLURM_CONF`); each allocated node's agent runs inside the job's step and is
reached with `srun --overlap` from the login node. Every node of the suite's cluster is this
machine, so each node's agent replays a simulated node of its own (`replay:`) and starts
the sim engine, as the demo's nodes do.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kept_demo import run_json
from ports import free_port
from slurm_cluster import SlurmCluster
from slurm_login import login_node, write_captures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LLAMA_8B = "catalog:meta-llama/Llama-3.1-8B-Instruct"


RAILS = "[" + ", ".join(f"mlx5_{rail}" for rail in range(8)) + "]"


def _cluster_yaml(captures: Path, **more: str) -> str:
    extra = "".join(f", {key}: {value}" for key, value in more.items())
    return (
        "  - name: big\n"
        f"    slurm: {{login: slurm-login, partition: gpu, replay: {captures}{extra}}}\n"
        f"    fabrics: [{{name: ib-a, hcas: {RAILS}}}]\n"
    )


def _captures(tmp_path: Path) -> Path:
    return write_captures(
        tmp_path / "captures", {"h100-1": "hgx-h100", "h100-2": "hgx-h100", "a100-1": "hgx-h100"}
    )


def test_a_replica_is_one_job_asked_through_a_gateway_and_stopped_with_its_job(
    tmp_path: Path, slurm: SlurmCluster
):
    script = (
        "steps:\n"
        f"  - serve: {{model: '{LLAMA_8B}', context: 8192, name: llama, cluster: big}}\n"
        "  - replicas: {}\n"
        f"  - gateway: {{name: gw, port: {free_port()}}}\n"  # not 30000: workers share the host
        "  - ask: {gateway: gw, prompt: 'hello from slurm', max_tokens: 8}\n"
        "  - stop: {gateway: gw}\n"
        "  - stop: {replica: llama}\n"
    )
    with login_node(
        tmp_path, {"SLURM_CONF": str(slurm.conf)}, _cluster_yaml(_captures(tmp_path))
    ) as (inventory, env):
        code, lines, said = run_json(inventory, script, env=env, timeout=200)
    assert code == 0, (said, lines)
    served, listed, gateway, asked, _, stopped = (line["result"] for line in lines)
    assert served["phase"] == "ready"
    steps = [step["step"] for step in served["trace"] if step["step"].startswith("job ")]
    # The controller's first scheduling pass may come after the first poll: pending first.
    assert [s for s in steps if s != "job pending"] == [
        "job submitted",
        "job running",
        "job joined",
    ]
    (replica,) = listed["replicas"]
    job_id = replica["slurm"]["job_id"]
    assert replica["slurm"] == {
        "cluster": "big",
        "job_id": job_id,
        "nodes": [replica["slurm"]["nodes"][0]],
        "state": "RUNNING",
        "reason": None,
    }
    (shard,) = replica["shards"]
    assert shard["node"] == f"{replica['slurm']['nodes'][0]}.j{job_id}"
    assert gateway["node"] == "big-login"  # the gateway runs on the login node
    assert "simulated" in asked["text"]
    assert stopped["slurm_jobs_cancelled"] == [job_id]
    assert slurm.queue() == []


def _hold_cards(slurm: SlurmCluster, tmp_path: Path, node: str, cards: int) -> str:
    """Another job (another user's, as far as llmgw knows) holding `cards` h100 of `node`."""
    job = slurm.run(
        "sbatch", "--parsable", "--job-name=someone-else", f"--nodelist={node}",
        f"--gres=gpu:h100:{cards}", f"--output={tmp_path}/other-%j.out", "--wrap=sleep 300",
    ).strip()  # fmt: skip
    slurm.wait_for(
        f"job {job} running",
        lambda: slurm.run("squeue", "-h", "-o", "%T", "-j", job).strip() == "RUNNING",
    )
    return job


def test_a_two_node_replica_is_one_job_and_a_later_console_lists_and_stops_it(
    tmp_path: Path, slurm: SlurmCluster
):
    serve = (
        "steps:\n"
        "  - serve: {model: 'catalog:meta-llama/Llama-3.3-70B-Instruct', context: 8192,"
        " name: big70, cluster: big, gpu_class: h100-80g, gpus: 8, nodes: 2}\n"
    )
    with login_node(
        tmp_path, {"SLURM_CONF": str(slurm.conf)}, _cluster_yaml(_captures(tmp_path))
    ) as (inventory, env):
        code, lines, said = run_json(inventory, serve, env=env, timeout=200)
        assert code == 0, (said, lines)
        served = lines[0]["result"]
        (job_id,) = slurm.queue()  # one job for the whole replica
        assert [(p["node"], len(p["gpus"])) for p in served["placement"]["nodes"]] == [
            (f"h100-1.j{job_id}", 8),
            (f"h100-2.j{job_id}", 8),
        ]
        assert (served["way"]["tensor_parallel"], served["way"]["pipeline_parallel"]) == (8, 2)
        # The NCCL environment of the fabric the inventory names for the cluster.
        for shard in served["replica"]["shards"]:
            assert shard["env"]["NCCL_IB_HCA"].startswith("=mlx5_0"), shard["env"]
        # The engines outlive the console that started them: another finds them in the job.
        code, lines, said = run_json(
            inventory, "steps: [{replicas: {}}, {stop: {replica: big70}}]", env=env
        )
    assert code == 0, (said, lines)
    listed, stopped = (line["result"] for line in lines)
    (replica,) = listed["replicas"]
    assert replica["phase"] == "ready"
    assert replica["slurm"]["job_id"] == job_id
    assert replica["slurm"]["state"] == "RUNNING"
    assert sorted(s["node"] for s in replica["shards"]) == [
        f"h100-1.j{job_id}",
        f"h100-2.j{job_id}",
    ]
    assert stopped["slurm_jobs_cancelled"] == [job_id]
    assert slurm.queue() == []


def test_cards_another_job_holds_are_never_taken_and_a_job_that_cannot_start_says_why(
    tmp_path: Path, slurm: SlurmCluster
):
    others = [_hold_cards(slurm, tmp_path, "h100-1", 6), _hold_cards(slurm, tmp_path, "h100-2", 8)]
    script = (
        "steps:\n"
        f"  - serve: {{model: '{LLAMA_8B}', context: 8192, name: two, cluster: big,"
        " gpu_class: h100-80g, gpus: 2}\n"
        "  - replicas: {}\n"
        f"  - serve: {{model: '{LLAMA_8B}', context: 8192, name: three, cluster: big,"
        " gpu_class: h100-80g, gpus: 2, wait_s: 3}\n"
    )
    with login_node(
        tmp_path, {"SLURM_CONF": str(slurm.conf)}, _cluster_yaml(_captures(tmp_path))
    ) as (inventory, env):
        code, lines, said = run_json(inventory, script, env=env, timeout=200)
    assert code == 1, (said, lines)
    served, listed, refused = lines
    assert served["ok"], served
    (replica,) = listed["result"]["replicas"]
    # The two cards the other job left free on h100-1, and none of its six.
    (shard,) = replica["shards"]
    assert shard["node"].startswith("h100-1.j")
    assert sorted(shard["gpus"]) == ["6", "7"]
    assert shard["env"]["CUDA_VISIBLE_DEVICES"] == "6,7"
    # No node has two cards free now: Slurm says so within one poll, and the serve gives up.
    assert not refused["ok"]
    pending = [s for s in refused["result"]["trace"] if s["step"] == "job pending"]
    assert "Reason=Resources" in pending[-1]["detail"]
    assert refused["error"].startswith("three did not come up: job ")
    assert "is still PENDING (Reason=Resources) after 3 s" in refused["error"]
    # The other jobs run on, and the refused one is gone (the served one stays running).
    running = slurm.run("squeue", "-h", "-o", "%i %T").split("\n")
    assert {f"{job} RUNNING" for job in others} <= {line.strip() for line in running}
    assert len([line for line in running if line.strip()]) == 3


def test_the_console_shows_a_served_replicas_job_state_and_names_it_on_the_clusters_node(
    tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch
):
    """A replica served headless, then a console opened on the same inventory: the replicas
    screen says its job and `RUNNING`, and the fleet's cluster names the node's holder by the
    replica, not as another job."""
    import asyncio

    serve = (
        "steps:\n"
        f"  - serve: {{model: '{LLAMA_8B}', context: 8192, name: llama, cluster: big,"
        " gpu_class: h100-80g, gpus: 1}\n"
    )
    with login_node(
        tmp_path, {"SLURM_CONF": str(slurm.conf)}, _cluster_yaml(_captures(tmp_path))
    ) as (inventory, env):
        code, lines, said = run_json(inventory, serve, env=env, timeout=200)
        assert code == 0, (said, lines)
        (job_id,) = slurm.queue()
        monkeypatch.setenv("HOME", env["HOME"])
        asyncio.run(_console_sees_the_job(inventory, job_id))
    # The job is cancelled by the fixture after the test (its `hold` stops the shards). A
    # headless `stop` here, after a console that had joined the job quit, once hung past
    # 100 s on a loaded machine (twice in three runs, once with this test alone): not yet
    # understood. The wizard test, whose console served its replica itself, stops fine.


async def _console_sees_the_job(inventory: str, job_id: str) -> None:
    from live_walk import until
    from textual.widgets import DataTable, Static

    from llmgw_tui.app import LlmgwApp
    from llmgw_tui.feed import LiveFeed
    from llmgw_tui.screens.replicas import ReplicasScreen

    app = LlmgwApp(LiveFeed(inventory=inventory, demo=False, refresh_s=1.0), animation="none")
    async with app.run_test(size=(160, 40)) as pilot:
        clusters = app.screen.query_one("#fleet-clusters", Static)
        await until(
            pilot, lambda: "llama (job" in str(clusters.content), "the job on the fleet", 60
        )
        assert f"llama (job {job_id}, 1 card)" in str(clusters.content)
        assert "another job" not in str(clusters.content)
        await pilot.press("colon", *"replicas", "enter")
        await until(pilot, lambda: isinstance(app.screen, ReplicasScreen), "the replicas")
        table = app.screen.query_one("#replicas", DataTable)

        def way() -> str:
            return str(table.get_cell("llama", "way")) if table.row_count else ""

        await until(pilot, lambda: "RUNNING" in way(), "the job's state", 60)
        assert way().endswith(f"· job {job_id} on big · RUNNING")
        await pilot.press("q")


def test_the_serve_wizard_offers_the_cluster_as_a_place_and_serves_there_as_one_job(
    tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch
):
    """The wizard on an inventory with cluster `big`: the place field names it, a name the
    inventory lacks is refused, the ways are planned on its partition, and Serve submits one
    job whose replica the replicas screen shows `RUNNING`. Quitting while the replica starts
    leaves its job for a later run's `stop`."""
    import asyncio

    with login_node(
        tmp_path, {"SLURM_CONF": str(slurm.conf)}, _cluster_yaml(_captures(tmp_path))
    ) as (inventory, env):
        monkeypatch.setenv("HOME", env["HOME"])
        asyncio.run(_walk_the_wizard_to_the_cluster(inventory))
        (job_id,) = slurm.queue()
        code, lines, said = run_json(inventory, "steps: [{stop: {replica: wiz}}]", env=env)
    assert code == 0, (said, lines)
    assert lines[0]["result"]["slurm_jobs_cancelled"] == [job_id]
    assert slurm.queue() == []


async def _walk_the_wizard_to_the_cluster(inventory: str) -> None:
    from live_walk import until
    from textual.widgets import DataTable, Input, Static

    from llmgw_tui.app import LlmgwApp
    from llmgw_tui.feed import LiveFeed
    from llmgw_tui.screens.replicas import ReplicasScreen
    from llmgw_tui.screens.serve import ServeScreen

    app = LlmgwApp(LiveFeed(inventory=inventory, demo=False, refresh_s=1.0), animation="none")
    async with app.run_test(size=(160, 44)) as pilot:
        await until(pilot, lambda: app.feed.cluster_names() == ("big",), "the fleet open", 60)
        await pilot.press("colon", *"serve", "enter")
        await until(pilot, lambda: isinstance(app.screen, ServeScreen), "the wizard")
        wizard = app.screen
        assert isinstance(wizard, ServeScreen)
        await pilot.press(*LLAMA_8B)
        place = wizard.query_one("#serve-place", Input)
        assert place.display
        question = str(wizard.query_one("#serve-place-question", Static).content)
        assert "a Slurm cluster: big" in question
        place.value = "small"
        await until(
            pilot,
            lambda: "no Slurm cluster is named 'small'" in (wizard.blocked or ""),
            "a refused place",
        )
        place.value = "big"
        await until(pilot, lambda: wizard.blocked is None, "the place accepted")
        await pilot.press("ctrl+n")
        await until(
            pilot,
            lambda: wizard.step == "way" or wizard.blocked not in (None, "planning…"),
            "the ways on the cluster",
            60,
        )
        assert wizard.step == "way", wizard.blocked
        assert wizard.way is not None and wizard.way["gpu_class"] in ("h100-80g", "a100-80g")
        await pilot.press("ctrl+n")
        await until(pilot, lambda: wizard.step == "size" and wizard.blocked is None, "a fit", 60)
        await pilot.press("ctrl+n")
        await until(pilot, lambda: wizard.step == "extras", "the extras page")
        wizard.query_one("#serve-name", Input).value = "wiz"
        await until(pilot, lambda: wizard.blocked is None, "valid extras")
        await pilot.press("ctrl+n")
        await until(pilot, lambda: wizard.step == "confirm" and wizard.blocked is None, "confirm")
        confirm = str(wizard.query_one("#serve-preview", Static).content)
        assert "one Slurm job on big" in confirm
        await pilot.press("ctrl+n")
        await until(pilot, lambda: isinstance(app.screen, ReplicasScreen), "the replicas page")
        replicas = app.screen
        assert isinstance(replicas, ReplicasScreen)
        table = replicas.query_one("#replicas", DataTable)

        def way() -> str:
            listed = any(view.name == "wiz" for view in replicas.views)
            return str(table.get_cell("wiz", "way")) if listed and table.row_count else ""

        await until(pilot, lambda: "on big · RUNNING" in way(), "the replica's job running", 120)
        # The console quits while its serve may still wait on the engine: the replica has
        # started in the job, so the job is left for the later `stop` to find and cancel.
