"""Each engine's prefill/decode flags and the transfer's environment, as the engines read them
(pure): vLLM's `--kv-transfer-config` per connector and role, SGLang's `--disaggregation-*`,
gated by the installed release, and rails named exactly."""

from __future__ import annotations

import json

import pytest
from engine_nodes import flag, h100_cards, h100_node, ib_adapters, request

from llmgw_core.engines import build_launch
from llmgw_core.engines.disagg import (
    RULES,
    check_pairing,
    check_version,
    connector_rule,
    kv_transfer_config,
    role_flags,
    transfer_env,
)
from llmgw_core.engines.spec import FabricAdapter, PdLaunch
from llmgw_core.errors import BadInput

IB = (FabricAdapter("mlx5_0", 1, "InfiniBand"), FabricAdapter("mlx5_1", 1, "InfiniBand"))
ROCE = (FabricAdapter("mlx5_4", 1, "Ethernet", gid_index=3),)


@pytest.mark.parametrize(
    ("connector", "prefill", "decode"),
    [
        (
            "nixl",
            {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
            {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
        ),
        (
            "mooncake",
            {"kv_connector": "MooncakeConnector", "kv_role": "kv_producer"},
            {"kv_connector": "MooncakeConnector", "kv_role": "kv_consumer"},
        ),
        (
            "lmcache",
            {
                "kv_connector": "LMCacheConnectorV1",
                "kv_role": "kv_producer",
                "kv_connector_extra_config": {"discard_partial_chunks": False},
            },
            {
                "kv_connector": "LMCacheConnectorV1",
                "kv_role": "kv_consumer",
                "kv_connector_extra_config": {"discard_partial_chunks": False},
            },
        ),
    ],
)
def test_vllm_takes_one_kv_transfer_config_json_per_side(connector, prefill, decode):
    rule = connector_rule("vllm", connector)
    for role, wanted in (("prefill", prefill), ("decode", decode)):
        flags = role_flags(rule, role)
        assert flags[0] == "--kv-transfer-config" and len(flags) == 2
        assert json.loads(flags[1]) == wanted
        assert " " not in flags[1]  # one argument, compact


def test_vllm_defaults_to_nixl_and_sglang_to_mooncake():
    assert connector_rule("vllm", None).engine_name == "NixlConnector"
    assert connector_rule("sglang", None).engine_name == "mooncake"


def test_sglang_prefill_and_decode_flags_name_mode_backend_port_and_the_rails():
    rule = connector_rule("sglang", "nixl")
    assert role_flags(rule, "prefill", bootstrap_port=9100, ib_devices=("mlx5_0", "mlx5_1")) == [
        "--disaggregation-mode", "prefill",
        "--disaggregation-transfer-backend", "nixl",
        "--disaggregation-bootstrap-port", "9100",
        "--disaggregation-ib-device", "mlx5_0,mlx5_1",
    ]  # fmt: skip
    decode = role_flags(connector_rule("sglang", "mooncake"), "decode")
    assert decode[:4] == [
        "--disaggregation-mode",
        "decode",
        "--disaggregation-transfer-backend",
        "mooncake",
    ]
    assert "--disaggregation-ib-device" not in decode  # no rails: one node or a domain


def test_sglang_is_given_no_kv_transfer_config():
    with pytest.raises(ValueError):
        kv_transfer_config(connector_rule("sglang", "mooncake"), "prefill")


@pytest.mark.parametrize(
    ("engine", "connector", "version", "refused"),
    [
        ("vllm", "mooncake", "0.11.2", True),
        ("vllm", "mooncake", "0.15.0", False),
        ("vllm", "nixl", "0.8.5", True),
        ("vllm", "nixl", "0.9.0rc1+cu128", False),
        ("vllm", "lmcache", "0.32.0", False),
        ("sglang", "nixl", "0.4.6.post1", True),
        ("sglang", "mooncake", "0.5.3", False),
        ("vllm", "mooncake", None, False),  # unreported: the engine names it itself
    ],
)
def test_a_connector_newer_than_the_installed_release_is_refused_naming_both(
    engine, connector, version, refused
):
    rule = connector_rule(engine, connector)
    if not refused:
        check_version(rule, version, "h100-a-01")
        return
    with pytest.raises(BadInput) as caught:
        check_version(rule, version, "h100-a-01")
    sentence = caught.value.sentence()
    assert f"{engine} {version} on h100-a-01 has no {rule.engine_name} connector" in sentence
    assert f"it came in {rule.since_text}" in sentence


def test_pairing_equal_or_dividing_widths_as_each_connector_allows():
    nixl, mooncake = connector_rule("vllm", "nixl"), connector_rule("vllm", "mooncake")
    check_pairing(nixl, 2, 8)
    check_pairing(nixl, 8, 4)
    check_pairing(mooncake, 4, 4)
    with pytest.raises(BadInput, match="pairs only equal widths"):
        check_pairing(mooncake, 4, 8)
    with pytest.raises(BadInput, match="4 cards wide and decode 6"):
        check_pairing(nixl, 4, 6)


def test_every_rule_has_a_role_for_each_side_and_a_release():
    for (engine, connector), rule in RULES.items():
        assert (rule.engine, rule.connector) == (engine, connector)
        assert len(rule.roles) == 2 and all(rule.roles) and rule.since


def test_nixl_over_infiniband_names_only_the_chosen_rails_and_never_tcp():
    env = transfer_env(connector_rule("vllm", "nixl"), "infiniband", IB, address="10.0.0.1")
    assert env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
    assert "tcp" not in env["UCX_TLS"].split(",") and "rc" in env["UCX_TLS"].split(",")
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.1"
    assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5600"


def test_nixl_on_roce_gives_the_v2_gid_and_inside_an_nvlink_domain_no_rails():
    roce = transfer_env(connector_rule("sglang", "nixl"), "roce", ROCE)
    assert roce["UCX_IB_GID_INDEX"] == "3" and roce["UCX_NET_DEVICES"] == "mlx5_4:1"
    nvlink = transfer_env(connector_rule("vllm", "nixl"), "nvlink", ())
    assert "UCX_NET_DEVICES" not in nvlink and nvlink["UCX_TLS"].startswith("cuda_ipc")


def test_mooncake_is_filtered_to_the_rails_and_tcp_only_when_allowed():
    rule = connector_rule("vllm", "mooncake")
    env = transfer_env(rule, "infiniband", IB, bootstrap_port=9000)
    assert env["MC_MS_FILTERS"] == "mlx5_0,mlx5_1" and "MC_FORCE_TCP" not in env
    assert env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "9000"
    assert transfer_env(rule, "tcp", (), interface="eno1")["MC_FORCE_TCP"] == "1"
    tcp_nixl = transfer_env(connector_rule("vllm", "nixl"), "tcp", (), interface="eno1")
    assert tcp_nixl["UCX_NET_DEVICES"] == "eno1" and "tcp" in tcp_nixl["UCX_TLS"]


def _pd(role: str, connector: str, transport: str = "infiniband") -> PdLaunch:
    return PdLaunch(
        role=role,
        connector=connector,
        transport=transport,
        rails={"h100-a-01": ib_adapters("mlx5_0", "mlx5_1")},
    )


def test_a_vllm_decode_worker_starts_with_its_connector_and_its_rails_beside_nccls():
    node = h100_node(engine_version="0.15.1", gpus=h100_cards(4))
    plan = build_launch(request(nodes=(node,), pd=_pd("decode", "mooncake")))
    main = plan.shards[0].main
    config = json.loads(flag(main.argv, "--kv-transfer-config") or "")
    assert config == {"kv_connector": "MooncakeConnector", "kv_role": "kv_consumer"}
    assert main.env["MC_MS_FILTERS"] == "mlx5_0,mlx5_1"
    assert main.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # the cards are still placement's


def test_the_operators_ucx_variable_wins_over_the_transfers():
    node = h100_node(gpus=h100_cards(2))
    req = request(nodes=(node,), pd=_pd("prefill", "nixl"), extra_env={"UCX_TLS": "rc_x"})
    main = build_launch(req).shards[0].main
    assert main.env["UCX_TLS"] == "rc_x" and main.env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"


def test_an_sglang_prefill_worker_names_its_mode_backend_and_ib_devices():
    node = h100_node(engine_version="0.5.3", program=("python3", "-m", "sglang.launch_server"))
    req = request(nodes=(node,), engine="sglang", pd=_pd("prefill", "nixl"))
    main = build_launch(req).shards[0].main
    assert flag(main.argv, "--disaggregation-mode") == "prefill"
    assert flag(main.argv, "--disaggregation-transfer-backend") == "nixl"
    assert flag(main.argv, "--disaggregation-ib-device") == "mlx5_0,mlx5_1"
    assert main.env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"


def test_a_worker_on_a_release_without_its_connector_is_refused_before_it_starts():
    node = h100_node(engine_version="0.12.0")
    with pytest.raises(BadInput, match=r"vllm 0\.12\.0 on h100-a-01 has no MooncakeConnector"):
        build_launch(request(nodes=(node,), pd=_pd("prefill", "mooncake")))


def test_a_replica_doing_both_gets_no_transfer_flag_or_variable():
    main = build_launch(request()).shards[0].main
    assert "--kv-transfer-config" not in main.argv
    assert not any(key.startswith(("UCX_", "MC_")) for key in main.env)
