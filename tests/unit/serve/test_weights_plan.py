"""Where a replica's Hub weights come from on each node: held, copied from a neighbour, downloaded."""

from __future__ import annotations

from llmgw_core.facts import ModelDir, StoredModel
from llmgw_core.serve.fetch import DOWNLOAD_SCRIPT, download_command, node_python, weights_plan

REPO = "meta-llama/Llama-3.3-70B-Instruct"
HELD_AT = "/srv/models/meta-llama/Llama-3.3-70B-Instruct"


def _holding(facts, *, state="complete"):
    stored = StoredModel(name=REPO, path=HELD_AT, format="safetensors", state=state)
    folder = ModelDir(state=state, models=(stored,))
    return facts.model_copy(update={"model_dirs": {"/srv/models": folder}})


def _fleet(demo_facts, holders=(), model_dirs=()):
    snapshot, specs = demo_facts
    facts = {
        name: _holding(state.facts) if name in holders else state.facts
        for name, state in snapshot.nodes.items()
    }
    by_name = {s.name: s.model_copy(update={"model_dirs": tuple(model_dirs)}) for s in specs}
    return by_name, facts


def test_a_node_holding_the_model_uses_it_and_its_fabric_neighbour_copies_it(demo_facts):
    specs, facts = _fleet(demo_facts, holders=("h100-a-01",))
    plan = weights_plan(REPO, ["h100-a-01", "h100-a-02"], specs, facts)
    assert plan.path == HELD_AT
    assert plan.present == ("h100-a-01",)
    assert dict(plan.copy_from) == {"h100-a-02": "h100-a-01"}
    assert plan.download == ()


def test_a_holder_outside_the_replica_lends_its_copy_only_across_a_shared_fabric(demo_facts):
    specs, facts = _fleet(demo_facts, holders=("h100-a-02", "cpu-01"))
    plan = weights_plan(REPO, ["h100-a-01"], specs, facts)
    assert dict(plan.copy_from) == {"h100-a-01": "h100-a-02"}
    # The L40S node shares no fabric with the holders: it downloads to the same path.
    plan = weights_plan(REPO, ["l40s-01"], specs, facts)
    assert plan.path == HELD_AT and plan.download == ("l40s-01",) and not plan.copy_from


def test_a_partial_copy_is_not_taken_for_the_model(demo_facts):
    snapshot, specs = demo_facts
    facts = {n: s.facts for n, s in snapshot.nodes.items()}
    facts["h100-a-01"] = _holding(facts["h100-a-01"], state="partial")
    plan = weights_plan(REPO, ["h100-a-01"], {s.name: s for s in specs}, facts)
    assert plan.present == () and plan.download == ("h100-a-01",)


def test_nobody_holding_it_downloads_into_the_first_model_dir_or_else_the_hub_cache(demo_facts):
    specs, facts = _fleet(demo_facts, model_dirs=("/data/models", "/scratch"))
    plan = weights_plan(REPO, ["h100-a-01", "h100-a-02"], specs, facts)
    assert plan.path == f"/data/models/{REPO}"
    assert plan.download == ("h100-a-01", "h100-a-02")
    specs, facts = _fleet(demo_facts, model_dirs=("~/models",))
    assert weights_plan(REPO, ["h100-a-01"], specs, facts).path is None  # the Hub cache


def test_the_download_command_carries_no_token_its_secret_env_goes_apart(demo_facts):
    _snapshot, specs = demo_facts
    python = node_python(specs[0])
    command = download_command(python, REPO, "main", "/data/models/x")
    assert command.env == {}  # the token travels as the fetch shard's secret_env
    assert command.argv[:3] == (python, "-c", DOWNLOAD_SCRIPT)
    assert command.argv[3:] == (REPO, "main", "/data/models/x", "")
    compile(DOWNLOAD_SCRIPT, "<download>", "exec")
