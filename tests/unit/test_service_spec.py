"""What `apply` decides from a service document and the replicas found (pure).

The property: carrying the actions out leaves exactly the replicas the
document asks for, and deciding again then finds nothing to do — from any
mix of replicas found (current, stale, failed, surplus, an aborted roll's).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from llmgw_core.service.spec import (
    Running,
    ServiceDoc,
    actions,
    changes,
    gateway_action,
    replica_names,
    service_label,
)

MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"


def _doc(**given: object) -> ServiceDoc:
    return ServiceDoc.model_validate({"name": "chat", "model": MODEL, **given})


def _running(doc: ServiceDoc, name: str, at: float, phase: str = "ready") -> Running:
    label = service_label(doc)
    return Running(name, label["hash"], label["settings"], phase, created_at=at)


def _decide(doc: ServiceDoc, found: list[Running]) -> list[dict]:
    label = service_label(doc)
    taken = [r.name for r in found]
    return [
        a.as_dict()
        for a in actions(doc.name, doc.replicas, label["settings"], label["hash"], found, taken)
    ]


def test_the_same_document_again_changes_nothing():
    doc = _doc(context=8192, replicas=2)
    assert _decide(doc, [_running(doc, "chat-1", 1), _running(doc, "chat-7", 2)]) == []


def test_a_new_context_replaces_each_replica_naming_the_change():
    old, new = _doc(context=8192, replicas=2), _doc(context=16384, replicas=2)
    found = [_running(old, "chat-1", 1), _running(old, "chat-2", 2)]
    assert _decide(new, found) == [
        {"action": "replace", "replica": "chat-1", "why": "context 8192 → 16384", "by": "chat-3"},
        {"action": "replace", "replica": "chat-2", "why": "context 8192 → 16384", "by": "chat-4"},
    ]


def test_fewer_replicas_stop_the_newest_first():
    doc = _doc(context=8192, replicas=1)
    found = [_running(doc, "chat-1", 1), _running(doc, "chat-2", 3), _running(doc, "chat-3", 2)]
    decided = _decide(doc, found)
    assert [(a["action"], a["replica"]) for a in decided] == [
        ("stop", "chat-2"),
        ("stop", "chat-3"),
    ]
    assert decided[0]["why"] == "the service wants 1 replica; 3 run as it says"


def test_a_failed_replica_is_forgotten_and_started_again():
    doc = _doc(context=8192, replicas=2)
    found = [_running(doc, "chat-1", 1), _running(doc, "chat-2", 2, phase="failed")]
    decided = _decide(doc, found)
    assert [(a["action"], a["replica"]) for a in decided] == [
        ("stop", "chat-2"),
        ("start", "chat-3"),
    ]


def test_an_aborted_roll_leaves_a_mix_that_is_made_whole():
    old, new = _doc(context=8192, replicas=2), _doc(context=16384, replicas=2)
    # chat-3 came up with the new settings; its apply died before it stopped chat-1.
    found = [_running(old, "chat-1", 1), _running(old, "chat-2", 2), _running(new, "chat-3", 3)]
    decided = _decide(new, found)
    assert [(a["action"], a["replica"], a.get("by")) for a in decided] == [
        ("stop", "chat-2", None),
        ("replace", "chat-1", "chat-4"),
    ]
    assert "context 8192 → 16384" in decided[0]["why"]


def test_changes_are_named_in_words():
    before = service_label(_doc(context=8192))["settings"]
    after = service_label(_doc(context=8192, gpu_class="h100-80g", env={"NCCL_DEBUG": "INFO"}))
    assert changes(before, after["settings"]) == [
        "gpu_class (any) → h100-80g",
        "env {} → {NCCL_DEBUG=INFO}",
    ]


def test_settings_that_do_not_restart_an_engine_do_not_change_the_hash():
    quick = service_label(_doc(context=8192, fallbacks=2, timeout=60, drain_s=5, replicas=4))
    assert quick["hash"] == service_label(_doc(context=8192))["hash"]


def test_new_names_never_repeat_one_taken():
    assert replica_names("chat", ["chat-2", "chat-10", "chatty-40", "other-99"], 2) == [
        "chat-11",
        "chat-12",
    ]


def test_the_gateway_is_started_only_when_it_does_not_run():
    doc = _doc(gateway="front")
    assert gateway_action(doc, ["front"]) is None
    started = gateway_action(doc, ["other"])
    assert started is not None and started.as_dict()["gateway"] == "front"
    assert gateway_action(_doc(), []) is None


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"replicas": 65}, "must be from 0 to 64, or {min, max, …}"),
        ({"replicas": {"min": 3, "max": 2}}, "min (3) is more than max (2)"),
        ({"replicas": {"max": 2, "target_waiting": None}}, "give target_waiting, target_kv"),
        ({"replicas": {"max": 2, "target_kv": 1.5}}, "less than or equal to 1"),
        ({"replicas": True}, "replicas is true, not a number"),
        ({"name": "a b"}, "should match pattern"),
        ({"contxt": 8192}, "Extra inputs are not permitted"),
        ({"gateway": "not a name"}, "must start with a letter or digit"),
        ({"drain_s": -1}, "greater than or equal to 0"),
    ],
)
def test_a_bad_document_is_refused(given: dict, said: str):
    with pytest.raises(ValidationError, match=re.escape(said)):
        ServiceDoc.model_validate({"name": "chat", "model": MODEL, **given})


CONTEXTS = st.sampled_from([4096, 8192, 16384])
PHASES = st.sampled_from(["ready", "ready", "loading", "failed", "stopped", "unreachable"])


@settings(max_examples=300, deadline=None)
@given(
    want=st.integers(0, 5),
    context=CONTEXTS,
    found=st.lists(st.tuples(CONTEXTS, PHASES, st.integers(0, 1000)), max_size=8),
)
def test_carrying_the_actions_out_leaves_what_the_document_asks(want, context, found):
    doc = _doc(context=context, replicas=want)
    running = [
        _running(_doc(context=c), f"chat-{i + 1}", at, phase)
        for i, (c, phase, at) in enumerate(found)
    ]
    label = service_label(doc)
    decided = actions(
        "chat", want, label["settings"], label["hash"], running, [r.name for r in running]
    )
    by_name = {r.name: r for r in running}
    for action in decided:
        if action.action == "stop":
            del by_name[action.replica]
        elif action.action == "replace":
            del by_name[action.replica]
            by_name[action.by] = _running(doc, action.by, 2000)
        else:
            by_name[action.replica] = _running(doc, action.replica, 2000)
    after = list(by_name.values())
    assert all(r.hash == label["hash"] and not r.over for r in after)
    assert len(after) == want
    assert len({r.name for r in after}) == len(after)
    assert actions("chat", want, label["settings"], label["hash"], after, list(by_name)) == ()
    # A roll never lowers the service below what ran as asked: replaces come one at a time.
    assert sum(a.action == "replace" for a in decided) <= want


def test_the_wizards_arguments_become_a_document_that_reads_back_the_same():
    from llmgw_core.script.steps.serve import ServeArgs
    from llmgw_core.serve.args import ServeFields
    from llmgw_core.service.spec import doc_of_args, document_text

    args = ServeArgs(
        model=MODEL,
        name="chat-x",
        context=8192,
        engine="vllm",
        gpu_class="h100-80g",
        gpus=1,
        nodes=1,
        env={"NCCL_DEBUG": "INFO"},
        fallbacks=1,
        api_key_env="CHAT_KEY",
        engine_args={"enable_prefix_caching": True},
    )
    doc = doc_of_args(args, name="chat", replicas=2, gateway="front")
    serving = set(ServeFields.model_fields)
    # Applying the document starts what serving the arguments would: every serve field kept.
    assert doc.model_dump(include=serving) == args.model_dump(include=serving)
    text = document_text(doc)
    assert text.startswith(f"service:\n  name: chat\n  model: {MODEL}\n")
    import yaml

    again = ServiceDoc.model_validate(yaml.safe_load(text)["service"])
    assert again == doc
    assert "gateway: front\n" in text
