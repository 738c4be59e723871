"""Hub weights reaching the nodes on the demo fleet: a download run and watched, a copy between nodes.

The demo's nodes have no network, so the downloads here are real processes
on a real agent that either grow a folder (as `snapshot_download` does) or
are the real download script, offline, failing as it would on a node
without the repository.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_demo_harness import Demo

from llmgw_core.engines import ShardCommand
from llmgw_core.serve.fetch import FetchFailed, copy_between, download_command, run_fetch
from llmgw_core.serve.http import EngineReach
from llmgw_core.serve.progress import Trace

GROW = (
    "import os, sys, time\n"
    "os.makedirs(sys.argv[1], exist_ok=True)\n"
    "for part in range(3):\n"
    "    with open(os.path.join(sys.argv[1], f'model-{part}.safetensors'), 'wb') as out:\n"
    "        out.write(b'\\0' * 1_500_000)\n"
    "    time.sleep(1.0)\n"
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    running = Demo(tmp_path_factory.mktemp("serve-weights"))
    try:
        yield running
    finally:
        running.close()


def test_a_download_that_grows_the_model_folder_is_followed_to_its_end(demo: Demo):
    target = demo.demo.servers["cpu-01"].home / "models" / "grown"
    command = ShardCommand(name="fetch", argv=(sys.executable, "-c", GROW, str(target)), env={})
    trace = Trace()
    summary = demo.loop.run(
        run_fetch(demo.fleet, "cpu-01", command, str(target), 30.0, trace, replica="grown")
    )
    assert sum(f.stat().st_size for f in target.iterdir()) == 4_500_000
    steps = [(s["node"], s["step"]) for s in trace.steps]
    assert steps[0] == ("cpu-01", "fetch began") and steps[-1] == ("cpu-01", "fetch ended")
    assert summary.endswith("MB/s") and summary == trace.steps[-1]["detail"]
    # The fetch process is gone once done: no replica, no record left on the node.
    assert demo.step("replicas").result["replicas"] == []
    records = demo.loop.run(demo.fleet.request("cpu-01", "shard.list"))["shards"]
    assert records == []


def test_a_download_that_moves_no_byte_is_stopped_after_its_timeout(demo: Demo):
    stuck = ShardCommand(
        name="fetch", argv=(sys.executable, "-c", "import time; time.sleep(60)"), env={}
    )
    folder = demo.demo.servers["cpu-01"].home / "models" / "stuck"
    with pytest.raises(FetchFailed, match=r"the download on cpu-01 moved no byte for 1 s"):
        demo.loop.run(
            run_fetch(demo.fleet, "cpu-01", stuck, str(folder), 1.0, Trace(), replica="stuck")
        )
    records = demo.loop.run(demo.fleet.request("cpu-01", "shard.list"))["shards"]
    assert records == []


def test_the_real_download_script_failing_says_why_and_never_shows_the_token(
    demo: Demo, tmp_path: Path
):
    command = download_command(
        sys.executable,
        "example-org/not-on-this-node",
        None,
        str(tmp_path / "dl"),
    )
    secrets = {"HF_TOKEN": "hf_not_for_your_eyes", "HF_HUB_OFFLINE": "1"}
    with pytest.raises(FetchFailed) as failed:
        demo.loop.run(
            run_fetch(
                demo.fleet,
                "cpu-01",
                command,
                str(tmp_path / "dl"),
                30.0,
                Trace(),
                replica="x",
                secret_env=secrets,
            )
        )
    reason = failed.value.sentence()
    assert reason.startswith("the download on cpu-01 failed (the engine exited with code 1): ")
    assert "LocalEntryNotFoundError" in reason or "offline" in reason.lower()
    assert "hf_not_for_your_eyes" not in reason


def test_a_model_folder_is_copied_from_a_node_that_holds_it_to_one_that_does_not(demo: Demo):
    held = demo.demo.servers["h100-a-01"].home / "models" / "org" / "tiny"
    (held / "sub").mkdir(parents=True)
    (held / "config.json").write_text("{}")
    (held / "sub" / "model.safetensors").write_bytes(b"\1" * 5_000_000)
    reach = EngineReach(demo.fleet)
    try:
        copied = demo.loop.run(copy_between(reach, "h100-a-01", "h100-a-02", "models/org/tiny"))
    finally:
        demo.loop.run(reach.close())
    there = demo.demo.servers["h100-a-02"].home / "models" / "org" / "tiny"
    assert copied == 5_000_002
    assert (there / "sub" / "model.safetensors").read_bytes() == b"\1" * 5_000_000
    assert not (there.parent / "tiny.llmgw-partial").exists()


def test_a_hub_model_no_node_holds_is_fetched_before_any_card_is_claimed(demo: Demo):
    from llmgw_core.script.steps.plan import step_model
    from llmgw_core.serve.choice import Overrides
    from llmgw_core.serve.start import ServeRequest, serve

    model = step_model("catalog:meta-llama/Llama-3.1-8B-Instruct", demo.ctx)
    request = ServeRequest(
        model="meta-llama/Llama-3.1-8B-Instruct",
        name="fetched",
        context=8192,
        overrides=Overrides(gpu_class="l40s-48g"),
        hub_repo="meta-llama/Llama-3.1-8B-Instruct",
        secret_env={"HF_TOKEN": "hf_not_for_your_eyes", "HF_HUB_OFFLINE": "1"},
    )
    reach = EngineReach(demo.fleet)
    try:
        outcome = demo.loop.run(serve(demo.fleet, reach, request, model))
    finally:
        demo.loop.run(reach.close())
    # The demo's nodes have no Hub: the download is tried, fails, and nothing was started.
    assert outcome.phase == "failed"
    assert outcome.reason.startswith("the download on l40s-01 failed"), outcome.reason
    assert "hf_not_for_your_eyes" not in outcome.reason
    steps = [(s["node"], s["step"]) for s in outcome.trace.steps]
    assert steps[0] == (None, "placed") and steps[-1] == (None, "failed")
    assert not any(step == "claimed, process started" for _node, step in steps)
    assert demo.claims() == {}
