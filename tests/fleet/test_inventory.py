"""The inventory: validated whole before any connection, every mistake named with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw_core.errors import BadInput
from llmgw_core.inventory import load_inventory, parse_inventory

GOOD = """\
defaults: {user: ops, model_dirs: [/var/lib/llmgw-models]}
nodes:
  - name: gpu-a-01
    host: gpu-a-01.internal
    mgmt_interface: eth0
    fabrics: [{name: ib-a, hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3], rate_gbps: 400}]
    labels: {rack: r12}
    engines: {vllm: {bin: /opt/vllm/bin/vllm}, sglang: {python: /opt/sgl/bin/python}, llama.cpp: {bin: /usr/local/bin/llama-server}}
  - name: lab-1
    host: 127.0.0.1
    port: 2201
    user: lab
    model_dirs: []
    replay: /srv/captures/gb200-tray-04
    work_dir: /scratch/llmgw
known_hosts: ~/.ssh/known_hosts
"""


def refusal(text: str, tmp_path: Path | None = None) -> str:
    with pytest.raises(BadInput) as caught:
        parse_inventory(text, source="inv.yaml", folder=tmp_path)
    assert caught.value.exit_code == 2
    return caught.value.sentence()


def test_the_example_of_the_issue_is_read_with_defaults_applied_node_by_node():
    inventory = parse_inventory(GOOD)
    first, second = inventory.node_specs()
    assert first.user == "ops" and first.model_dirs == ("/var/lib/llmgw-models",)
    assert first.fabrics[0].hcas == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert first.fabrics[0].rate_gbps == 400
    assert first.engines.vllm.bin == "/opt/vllm/bin/vllm"
    assert first.engines.llama_cpp.bin == "/usr/local/bin/llama-server"
    assert first.port is None  # left to ~/.ssh/config
    assert second.user == "lab" and second.port == 2201 and second.model_dirs == ()
    assert second.replay == "/srv/captures/gb200-tray-04"
    assert inventory.known_hosts_path() == Path("~/.ssh/known_hosts").expanduser()


def test_llama_cpp_may_be_an_interpreter_that_has_it_installed():
    text = "nodes:\n  - {name: a, host: h, engines: {llama.cpp: {python: /opt/venv/bin/python}}}\n"
    spec = parse_inventory(text).node_specs()[0]
    assert spec.engines.llama_cpp.python == "/opt/venv/bin/python"


def test_an_unknown_key_is_named_with_its_line():
    text = "nodes:\n  - name: a\n    host: h\n    prot: 2201\n"
    assert refusal(text) == "inv.yaml: line 4: unknown key 'prot' in `nodes[0]`"


def test_a_wrong_type_is_named_with_its_line_and_the_value():
    text = "nodes:\n  - name: a\n    host: h\n  - name: b\n    host: h2\n    port: twenty-two\n"
    sentence = refusal(text)
    assert sentence.startswith("inv.yaml: line 6: `nodes[1].port`: input should be a valid integer")
    assert "'twenty-two'" in sentence


def test_a_rate_inside_a_fabric_is_named_with_its_line():
    text = "nodes:\n  - name: a\n    host: h\n    fabrics:\n      - {name: ib-a, hcas: [mlx5_0], rate_gbps: fast}\n"
    assert refusal(text).startswith("inv.yaml: line 5: `nodes[0].fabrics[0].rate_gbps`")


def test_two_nodes_with_one_name_are_refused_at_the_second():
    text = "nodes:\n  - name: a\n    host: h1\n  - name: a\n    host: h2\n"
    assert (
        refusal(text) == "inv.yaml: line 4: two nodes are named 'a': give every node its own name"
    )


def test_a_key_given_twice_is_refused_rather_than_silently_overwritten():
    text = "nodes:\n  - name: a\n    host: h1\n    host: h2\n"
    assert refusal(text) == "inv.yaml: line 4: 'host' is given twice"


def test_an_identity_file_that_cannot_be_read_is_refused_before_connecting(tmp_path: Path):
    text = "nodes:\n  - name: a\n    host: h\n    identity_file: keys/lab\n"
    sentence = refusal(text, tmp_path)
    assert sentence.startswith(
        f"inv.yaml: line 4: the identity file {tmp_path}/keys/lab cannot be read (No such file"
    )
    assert sentence.endswith("point identity_file at a private key this user can read")


def test_a_relative_identity_file_is_found_beside_the_inventory(tmp_path: Path):
    (tmp_path / "lab").write_text("key")
    (tmp_path / "inventory.yaml").write_text("nodes:\n  - {name: a, host: h, identity_file: lab}\n")
    spec = load_inventory(tmp_path / "inventory.yaml").node_specs()[0]
    assert spec.identity_file == str(tmp_path / "lab")


def test_a_missing_host_names_the_node_line():
    assert (
        refusal("nodes:\n  - name: a\n    port: 22\n")
        == "inv.yaml: line 2: `nodes[0].host` is required"
    )


def test_a_node_name_that_is_not_a_token_is_refused():
    sentence = refusal("nodes:\n  - {name: 'a b', host: h}\n")
    assert sentence.startswith(
        "inv.yaml: line 2: `nodes[0].name`: must start with a letter or digit"
    )


def test_an_inventory_without_nodes_says_so():
    assert refusal("nodes: []\n").startswith(
        "inv.yaml: line 1: `nodes`: list should have at least 1 item"
    )


def test_broken_yaml_names_its_line():
    assert refusal("nodes:\n  - name: a\n    host: [h\n").startswith(
        "inv.yaml: line 4: not valid YAML"
    )


def test_a_missing_inventory_file_says_how_to_get_going(tmp_path: Path):
    with pytest.raises(BadInput) as caught:
        load_inventory(tmp_path / "nope.yaml")
    assert "does not exist" in caught.value.message
    assert "--demo" in caught.value.fix


def test_the_runner_exits_2_on_a_bad_inventory_naming_its_line(tmp_path: Path):
    import json
    import subprocess
    import sys

    inventory = tmp_path / "inv.yaml"
    inventory.write_text("nodes:\n  - name: a\n    host: 127.0.0.1\n    port: 1\n    colour: red\n")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from llmgw_tui.cli import main; sys.exit(main())",
         "--inventory", str(inventory), "--run", "-", "--json"],
        input="steps:\n  - nodes: {}\n",
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    (line,) = [json.loads(text) for text in done.stdout.splitlines()]
    assert line == {
        "step": "nodes",
        "ok": False,
        "error": f"{inventory}: line 5: unknown key 'colour' in `nodes[0]`",
    }


def test_the_ssh_limits_of_an_inventory_reach_the_connections():
    from llmgw_core.fleet.session import ssh_settings

    inventory = parse_inventory(
        GOOD + "ssh: {max_startups: 4, max_startups_per_bastion: 6, banner_timeout_s: 5}\n"
    )
    settings = ssh_settings(inventory)
    assert settings.max_handshakes_per_server == 4
    assert settings.max_handshakes_per_bastion == 6
    assert settings.banner_timeout_s == 5.0
    assert settings.max_handshakes == 32  # not given: the default


def test_without_an_ssh_section_the_limits_stay_below_sshd_max_startups():
    from llmgw_core.fleet.session import ssh_settings

    settings = ssh_settings(parse_inventory(GOOD))
    assert settings.max_handshakes_per_server == 8
    assert settings.max_handshakes_per_bastion == 10


def test_a_zero_ssh_limit_is_named_with_its_line():
    sentence = refusal(GOOD + "ssh:\n  max_startups: 0\n")
    assert sentence.startswith("inv.yaml: line 18: `ssh.max_startups`:")
    assert "greater than or equal to 1" in sentence


def test_engine_bind_is_an_ip_address_taken_from_the_node_or_the_defaults():
    from llmgw_core.errors import BadInput
    from llmgw_core.inventory import parse_inventory

    text = (
        "defaults: {engine_bind: 0.0.0.0}\n"
        "nodes:\n  - {name: a, host: a.example}\n  - {name: b, host: b, engine_bind: 10.0.0.2}\n"
    )
    specs = {s.name: s.engine_bind for s in parse_inventory(text).node_specs()}
    assert specs == {"a": "0.0.0.0", "b": "10.0.0.2"}
    with pytest.raises(BadInput, match="must be an IP address"):
        parse_inventory("nodes:\n  - {name: a, host: a, engine_bind: eth0}\n")
