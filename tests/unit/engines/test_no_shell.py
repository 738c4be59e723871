"""Values from people and models reach the engine as single arguments, never through a shell."""

from __future__ import annotations

from engine_nodes import flag, h100_node, request, two_h100_nodes
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw_core.engines import build_launch

SHELLS = {"sh", "bash", "dash", "zsh", "env"}

# Printable text that does not start with '-' (a leading dash is refused: it would be a flag).
names = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x2FFF, exclude_characters="\x7f"),
    min_size=1,
    max_size=40,
).filter(lambda text: not text.startswith("-"))


@settings(max_examples=60, deadline=None)
@given(source=names, served_name=names)
def test_any_model_and_name_are_one_argument_each_on_every_rank(source, served_name):
    for engine, nodes in (("vllm", two_h100_nodes()), ("sglang", two_h100_nodes(program=()))):
        plan = build_launch(
            request(nodes=nodes, engine=engine, source=source, served_name=served_name)
        )
        for shard in plan.shards:
            argv = shard.main.argv
            model = argv[2] if engine == "vllm" else flag(argv, "--model-path")
            assert model == source
            assert flag(argv, "--served-model-name") == served_name
            assert all(isinstance(arg, str) for arg in argv)


def test_no_command_is_run_through_a_shell():
    plans = [
        build_launch(request(nodes=two_h100_nodes(engine_version="0.11.0"))),
        build_launch(request(nodes=two_h100_nodes())),
        build_launch(request(nodes=(h100_node(),), source="a b; rm -rf / $(reboot)")),
    ]
    for plan in plans:
        for shard in plan.shards:
            for command in shard.commands:
                assert command.argv[0].rsplit("/", 1)[-1] not in SHELLS
                assert "-c" not in command.argv
    assert "a b; rm -rf / $(reboot)" in plans[2].shards[0].main.argv


def test_a_command_shown_to_a_person_quotes_every_value():
    source = "/models/my model's dir"
    command = build_launch(request(nodes=(h100_node(),), source=source)).shards[0].main
    assert "'/models/my model'\"'\"'s dir'" in command.shell_text()
