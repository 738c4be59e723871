"""`disaggregation:` in a service document and `serve`: what the document alone refuses, each
in one sentence and exit 2 before anything connects, and what a kept label records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from llmgw_core.script.runner import run_script
from llmgw_core.service.spec import ServiceDoc, changes, service_label, side_label

MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"
SPLIT = {"prefill": {"replicas": 2}, "decode": {"replicas": 2}}


def _doc(**given: object) -> ServiceDoc:
    return ServiceDoc.model_validate({"name": "chat", "model": MODEL, **given})


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], step: str) -> tuple[int, str]:
    script = tmp_path / "script.yaml"
    script.write_text(f"steps:\n  - {step}\n", encoding="utf-8")
    code = run_script(str(script), as_json=True, inventory=None, demo=False)
    out, _ = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0]["ok"] is False
    return code, lines[0]["error"]


def test_a_document_with_two_prefill_and_two_decode_replicas_is_taken():
    doc = _doc(engine="vllm", gpus=4, disaggregation={**SPLIT, "connector": "nixl"})
    assert doc.disaggregation is not None
    assert doc.disaggregation.prefill and doc.disaggregation.prefill.replicas == 2
    assert doc.disaggregation.widths(doc.gpus) == (4, 4)


def test_auto_is_taken_as_a_word_and_as_a_mapping_with_its_workload():
    assert _doc(engine="sglang", disaggregation="auto").disaggregation.auto is True
    doc = _doc(
        engine="vllm",
        disaggregation={"auto": True, "workload": {"input_tokens": 8000, "output_tokens": 200}},
    )
    assert doc.disaggregation.workload.input_tokens == 8000


def test_the_label_records_the_split_as_json_and_a_service_without_one_keeps_its_hash():
    plain = _doc(engine="vllm", context=8192)
    split = _doc(engine="vllm", context=8192, disaggregation=SPLIT)
    assert "disaggregation" not in service_label(plain)["settings"]
    label = service_label(split)
    json.dumps(label)  # the nodes keep it as JSON
    assert label["settings"]["disaggregation"] == SPLIT
    assert label["hash"] != service_label(plain)["hash"]
    assert changes(service_label(plain)["settings"], label["settings"]) == [
        "disaggregation (any) → {decode={'replicas': 2}, prefill={'replicas': 2}}"
    ]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            {
                "engine": "vllm",
                "disaggregation": {"prefill": {"replicas": 0}, "decode": {"replicas": 2}},
            },
            "is 0: each side needs at least one replica (a ratio of zero",
        ),
        (
            {"engine": "vllm", "disaggregation": {"prefill": {"replicas": 1}}},
            "decode is missing: give both prefill and decode, or auto",
        ),
        (
            {"engine": "llama.cpp", "disaggregation": SPLIT},
            "disaggregation needs vLLM or SGLang, and engine llama.cpp is given (llama.cpp has no"
            " prefill/decode split): give engine: vllm or engine: sglang",
        ),
        (
            {"disaggregation": SPLIT},
            "disaggregation needs vLLM or SGLang, and no engine is given",
        ),
        (
            {"engine": "sglang", "disaggregation": {**SPLIT, "connector": "lmcache"}},
            "disaggregation: sglang has no lmcache connector: give connector: one of mooncake, nixl",
        ),
        (
            {"engine": "vllm", "disaggregation": {**SPLIT, "connector": "redis"}},
            "is 'redis': give one of nixl, mooncake, lmcache",
        ),
        (
            {
                "engine": "vllm",
                "disaggregation": {
                    "prefill": {"replicas": 1, "layout": {"gpus": 4}},
                    "decode": {"replicas": 1, "layout": {"gpus": 6}},
                },
            },
            "prefill is 4 cards wide and decode 6, and vllm's nixl connector pairs only widths"
            " of which one divides the other",
        ),
        (
            {
                "engine": "vllm",
                "gpus": 8,
                "disaggregation": {
                    "prefill": {"replicas": 1, "layout": {"gpus": 4}},
                    "decode": {"replicas": 1},
                    "connector": "mooncake",
                },
            },
            "prefill is 4 cards wide and decode 8, and vllm's mooncake connector pairs only equal",
        ),
        (
            {"engine": "vllm", "disaggregation": {"auto": True, **SPLIT}},
            "auto chooses the sides: give either auto or prefill and decode",
        ),
        (
            {"engine": "vllm", "disaggregation": ["prefill"]},
            "is a list: give auto, or {prefill: {replicas}, decode: {replicas}, connector?}",
        ),
        (
            {"engine": "vllm", "disaggregation": {"prefill": 2, "decode": 1}},
            "is 2: give {replicas: N, layout?: {gpus}}",
        ),
    ],
)
def test_what_the_document_alone_refuses_is_one_sentence(given, said):
    with pytest.raises(ValidationError) as caught:
        _doc(**given)
    assert said in str(caught.value)


def test_widths_one_of_which_divides_the_other_pair_over_nixl_and_sglangs_mooncake():
    for engine, connector in (("vllm", "nixl"), ("sglang", "mooncake"), ("sglang", "nixl")):
        doc = _doc(
            engine=engine,
            disaggregation={
                "prefill": {"replicas": 3, "layout": {"gpus": 2}},
                "decode": {"replicas": 1, "layout": {"gpus": 8}},
                "connector": connector,
            },
        )
        assert doc.disaggregation.widths(None) == (2, 8)


def test_a_zero_ratio_in_apply_is_exit_2_before_anything_connects(tmp_path, capsys):
    service = (
        f"{{name: chat, model: {MODEL}, engine: vllm,"
        " disaggregation: {prefill: {replicas: 0}, decode: {replicas: 1}}}"
    )
    code, error = _run(tmp_path, capsys, f"apply: {{service: {service}}}")
    assert code == 2
    assert "service.disaggregation.prefill.replicas is 0: each side needs at least one" in error


def test_llama_cpp_split_in_serve_is_exit_2_in_one_sentence(tmp_path, capsys):
    step = (
        f"serve: {{model: {MODEL}, engine: llama.cpp,"
        " disaggregation: {prefill: {replicas: 1}, decode: {replicas: 1}}}"
    )
    code, error = _run(tmp_path, capsys, step)
    assert code == 2
    assert "llama.cpp has no prefill/decode split" in error and "\n" not in error


@pytest.mark.parametrize("step", ["serve", "apply"])
def test_a_split_on_a_slurm_cluster_is_exit_2_in_one_sentence(tmp_path, capsys, step):
    """A split's workers are placed on SSH nodes: given a cluster too, they would start there
    rather than as the cluster's jobs, so the pair is refused before anything connects."""
    fields = f"model: {MODEL}, engine: vllm, cluster: hpc-a, disaggregation: {{prefill: {{replicas: 1}}, decode: {{replicas: 1}}}}"
    given = (
        f"serve: {{{fields}}}"
        if step == "serve"
        else f"apply: {{service: {{name: chat, {fields}}}}}"
    )
    code, error = _run(tmp_path, capsys, given)
    assert code == 2
    assert "disaggregation on a Slurm cluster is not supported yet" in error and "\n" not in error


_SIDE = st.one_of(
    st.none(),
    st.integers(-3, 70),
    st.booleans(),
    st.text(max_size=4),
    st.fixed_dictionaries(
        {"replicas": st.one_of(st.integers(-2, 70), st.booleans(), st.none())},
        optional={
            "layout": st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {}, optional={"gpus": st.integers(-1, 20), "nodes": st.integers(-1, 5)}
                ),
                st.integers(),
            ),
            "extra": st.integers(),
        },
    ),
)
_SPLITS = st.one_of(
    st.sampled_from(["auto", "AUTO", "", None, 0, [], {}]),
    st.fixed_dictionaries(
        {},
        optional={
            "prefill": _SIDE,
            "decode": _SIDE,
            "connector": st.one_of(
                st.sampled_from(["nixl", "mooncake", "lmcache", "tcp"]), st.integers()
            ),
            "auto": st.one_of(st.booleans(), st.text(max_size=3)),
            "allow_tcp": st.one_of(st.booleans(), st.integers(-1, 2)),
            "workload": st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {
                        "input_tokens": st.integers(-5, 10**8),
                        "output_tokens": st.integers(-5, 10**8),
                    },
                    optional={"ttft_s": st.floats(allow_nan=True), "itl_s": st.floats(-1, 100)},
                ),
            ),
        },
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    split=_SPLITS,
    engine=st.sampled_from([None, "vllm", "sglang", "llama.cpp"]),
    gpus=st.one_of(st.none(), st.integers(1, 16)),
)
def test_any_disaggregation_mapping_is_taken_or_refused_never_crashes(split, engine, gpus):
    given_fields: dict[str, object] = {"disaggregation": split}
    if engine:
        given_fields["engine"] = engine
    if gpus:
        given_fields["gpus"] = gpus
    try:
        doc = _doc(**given_fields)
    except ValidationError as exc:
        for error in exc.errors():
            assert error["msg"] and "Traceback" not in error["msg"]
        return
    if doc.disaggregation is not None:
        assert doc.engine in ("vllm", "sglang")
        assert doc.disaggregation.auto or (
            doc.disaggregation.prefill.replicas >= 1 and doc.disaggregation.decode.replicas >= 1
        )
        json.dumps(service_label(doc))


def test_a_side_scaled_on_the_other_sides_signal_is_refused_before_any_connection(tmp_path, capsys):
    """`keep` scales prefill on waiting prompts and time to first token, decode on KV in use
    and time between tokens: a side given the other's signal is told which are its own."""
    service = (
        f"{{name: chat-pd, model: {MODEL}, engine: vllm, disaggregation: {{"
        " prefill: {replicas: 1, scale: {max: 3, target_kv: 0.8}}, decode: {replicas: 1}}}"
    )
    code, error = _run(tmp_path, capsys, f"keep: {{service: {service}, duration_s: 1}}")
    assert code == 2
    assert (
        "prefill.scale: the prefill side scales on target_waiting or target_ttft_p99_s,"
        " not target_kv" in error
    )


def test_each_side_keeps_only_its_own_signals_and_decode_counts_no_waiting_by_default():
    doc = _doc(
        engine="vllm",
        disaggregation={
            "prefill": {"replicas": 1, "scale": {"max": 4, "target_ttft_p99_s": 1}},
            "decode": {"replicas": 2, "scale": {"min": 2, "max": 4, "target_kv": 0.8}},
        },
    )
    prefill, decode = doc.disaggregation.prefill.scale, doc.disaggregation.decode.scale
    assert (prefill.target_waiting, prefill.target_ttft_p99_s, prefill.target_kv) == (4.0, 1, None)
    assert (decode.target_waiting, decode.target_kv, decode.target_itl_p99_s) == (None, 0.8, None)


def test_a_decode_side_scaled_on_nothing_of_its_own_is_refused():
    with pytest.raises(ValidationError, match=r"decode\.scale: give target_kv or target_itl_p99_s"):
        _doc(
            engine="vllm",
            disaggregation={
                "prefill": {"replicas": 1},
                "decode": {"replicas": 1, "scale": {"max": 2}},
            },
        )


def test_changing_a_sides_scale_or_count_rolls_no_worker():
    base = {"prefill": {"replicas": 1}, "decode": {"replicas": 1}}
    scaled = {
        "prefill": {"replicas": 2, "scale": {"max": 4}},
        "decode": {"replicas": 1, "scale": {"max": 3, "target_kv": 0.8}},
    }
    before = service_label(_doc(engine="vllm", disaggregation=base))
    after = service_label(_doc(engine="vllm", disaggregation=scaled))
    for role in ("prefill", "decode"):
        assert side_label(before, role)["hash"] == side_label(after, role)["hash"]
    layout = {**base, "decode": {"replicas": 1, "layout": {"gpus": 2}}}
    changed = service_label(_doc(engine="vllm", disaggregation=layout))
    assert side_label(before, "prefill")["hash"] == side_label(changed, "prefill")["hash"]
    assert side_label(before, "decode")["hash"] != side_label(changed, "decode")["hash"]
