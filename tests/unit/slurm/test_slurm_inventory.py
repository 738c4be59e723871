"""A Slurm cluster in the inventory: one entry for the cluster, validated like every node,
each mistake one sentence with its line and exit code 2."""

from __future__ import annotations

import pytest

from llmgw_core.errors import BadInput
from llmgw_core.inventory import parse_inventory

GOOD = """\
nodes:
  - {name: gpu-a-01, host: gpu-a-01.internal}
clusters:
  - name: hpc-a
    slurm:
      login: hpc-login
      partition: gpu
      account: ml-team
      qos: normal
      constraint: "h100&nvlink"
      reservation: llm_2026
      time_limit: 1-00:00:00
      gres_name: gpu
    labels: {site: north}
  - name: hpc-b
    slurm: {login: 10.0.0.5, partition: "gpu,gpu-long", time_limit: 2:00:00}
"""


def refusal(text: str) -> str:
    with pytest.raises(BadInput) as caught:
        parse_inventory(text, source="inv.yaml")
    assert caught.value.exit_code == 2
    return caught.value.sentence()


def test_a_cluster_is_read_with_every_option_beside_the_nodes():
    inventory = parse_inventory(GOOD)
    # Each cluster's login node joins the fleet (leases, gateways), never as a place to serve.
    assert [(node.name, node.login_of) for node in inventory.node_specs()] == [
        ("gpu-a-01", None),
        ("hpc-a-login", "hpc-a"),
        ("hpc-b-login", "hpc-b"),
    ]
    slurm = inventory.cluster("hpc-a").slurm
    assert (slurm.login, slurm.partition, slurm.account, slurm.qos) == (
        "hpc-login",
        "gpu",
        "ml-team",
        "normal",
    )
    assert (slurm.constraint, slurm.reservation, slurm.time_limit) == (
        "h100&nvlink",
        "llm_2026",
        "1-00:00:00",
    )
    assert slurm.gres_name == "gpu" and inventory.cluster("hpc-a").labels == {"site": "north"}


def test_an_unquoted_time_limit_is_kept_as_written_not_read_as_a_base_60_number():
    slurm = parse_inventory(GOOD).cluster("hpc-b").slurm
    assert slurm.time_limit == "2:00:00"  # YAML 1.1 alone reads 7200
    assert slurm.partition == "gpu,gpu-long" and slurm.gres_name == "gpu" and slurm.account is None


def test_a_time_limit_in_minutes_may_be_a_bare_number():
    text = "clusters:\n  - {name: c, slurm: {login: l, partition: p, time_limit: 90}}\n"
    assert parse_inventory(text).cluster("c").slurm.time_limit == "90"


def test_an_inventory_of_clusters_alone_needs_no_nodes():
    inventory = parse_inventory("clusters:\n  - {name: c, slurm: {login: l, partition: p}}\n")
    (login,) = inventory.node_specs()  # the cluster's login node only
    assert (login.name, login.host, login.login_of) == ("c-login", "l", "c")
    assert inventory.cluster("c").slurm.login == "l"


def test_an_unknown_cluster_is_named_with_the_ones_there_are():
    with pytest.raises(BadInput) as caught:
        parse_inventory(GOOD).cluster("hpc-z")
    assert (
        caught.value.sentence()
        == "no cluster is named 'hpc-z' in the inventory: its clusters are hpc-a, hpc-b"
    )


@pytest.mark.parametrize(
    ("slurm", "said"),
    [
        ("{login: l}", "line 2: `clusters[0].slurm.partition` is required"),
        ("{partition: p}", "line 2: `clusters[0].slurm.login` is required"),
        ("{login: l, partition: p, qso: x}", "line 2: unknown key 'qso' in `clusters[0].slurm`"),
        (
            "{login: '-oProxyCommand=x', partition: p}",
            "`clusters[0].slurm.login`: must be a host name",
        ),
        ("{login: l, partition: 'gpu;id'}", "`clusters[0].slurm.partition`: must be a Slurm name"),
        (
            "{login: l, partition: p, account: '$(id)'}",
            "`clusters[0].slurm.account`: must be a Slurm name",
        ),
        ("{login: l, partition: p, qos: '-x'}", "`clusters[0].slurm.qos`: must be a Slurm name"),
        (
            "{login: l, partition: p, reservation: 'a b'}",
            "`clusters[0].slurm.reservation`: must be a Slurm name",
        ),
        (
            "{login: l, partition: p, constraint: 'h100 && x'}",
            "`clusters[0].slurm.constraint`: must be a feature expression",
        ),
        (
            "{login: l, partition: p, time_limit: 2h}",
            "`clusters[0].slurm.time_limit`: must be a Slurm time limit",
        ),
        (
            "{login: l, partition: p, time_limit: 1-25:00:00}",
            "must not have more than 23 hours after the days",
        ),
        ("{login: l, partition: p, time_limit: '0'}", "must be longer than 0 minutes"),
        (
            "{login: l, partition: p, time_limit: true}",
            "`clusters[0].slurm.time_limit`: input should be a valid string",
        ),
        (
            "{login: l, partition: p, gres_name: 'gpu:h100'}",
            "`clusters[0].slurm.gres_name`: must be a GRES name",
        ),
    ],
)
def test_a_bad_option_is_one_sentence_naming_its_key_and_line(slurm: str, said: str):
    sentence = refusal(
        f"clusters:\n  - name: c\n    slurm: {slurm}\n".replace("\n    slurm", "\n    slurm")
    )
    assert said in sentence.replace("line 3", "line 2"), sentence
    assert "\n" not in sentence


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "nodes: []\n",
            "inv.yaml: line 1: `nodes`: list should have at least 1 item: list a node, or a Slurm cluster under `clusters:`",
        ),
        (
            "defaults: {user: ops}\n",
            "inv.yaml: line 1: `nodes` is required: list the nodes, or a Slurm cluster",
        ),
        (
            "nodes: [{name: a, host: h}]\nclusters:\n  - {name: a, slurm: {login: l, partition: p}}\n",
            "inv.yaml: line 3: a node and a cluster are both named 'a'",
        ),
        (
            "clusters:\n  - {name: c, slurm: {login: l, partition: p}}\n  - {name: c, slurm: {login: m, partition: p}}\n",
            "inv.yaml: line 3: two clusters are named 'c'",
        ),
        (
            "clusters:\n  - {name: 'c d', slurm: {login: l, partition: p}}\n",
            "`clusters[0].name`: must start with a letter or digit",
        ),
        ("clusters:\n  - {name: c}\n", "`clusters[0].slurm` is required"),
    ],
)
def test_a_fleet_without_nodes_or_with_a_name_twice_is_one_sentence(text: str, said: str):
    assert said in refusal(text)


def test_the_example_of_docs_slurm_md_is_a_valid_inventory():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[3] / "docs" / "slurm.md").read_text()
    example = page.split("```yaml\n", 1)[1].split("```", 1)[0]
    slurm = parse_inventory(example).cluster("hpc-a").slurm
    assert (slurm.constraint, slurm.time_limit, slurm.reservation) == (
        "h100&nvlink",
        "1-00:00:00",
        "llm_2026",
    )
