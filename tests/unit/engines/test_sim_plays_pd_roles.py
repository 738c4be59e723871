"""A prefill or decode worker, built as a real fleet gets it, run by the sim: the sim reads its
role and connector from the very argv, says over what its KV goes from the very environment,
and the core reads that line back into the replica page's words (`KV over mlx5_0..3 (IB)`),
or a red line when the KV crosses TCP."""

from __future__ import annotations

from engine_nodes import h100_cards, h100_node, ib_adapters, request

from llmgw_agent.sim.engine.args import engine_kind, parse_engine_argv
from llmgw_agent.sim.engine.transfer import transfer_lines
from llmgw_core.engines import build_launch
from llmgw_core.engines.spec import FabricAdapter, PdLaunch
from llmgw_core.fabric.kv_transfer import device_span, kv_warning, label, read_kv_transport
from llmgw_core.serve.transport import kv_dict
from llmgw_core.serve.view import ReplicaView, ShardView
from llmgw_core.views.replicas import replica_row, shard_transport

RAILS = ib_adapters("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")


def _said(req) -> list[str]:
    main = build_launch(req).shards[0].main
    kind = engine_kind(list(main.argv))
    assert kind is not None
    return transfer_lines(parse_engine_argv(kind, list(main.argv)), dict(main.env))


def _worker(role: str, connector: str, transport: str, rails=RAILS, **more):
    node = h100_node(gpus=h100_cards(4), engine_version=more.pop("version", "0.19.0"), **more)
    pd = PdLaunch(role, connector, transport, rails={node.name: rails} if rails else {})
    return node, pd


def test_a_nixl_prefill_worker_on_four_ib_rails_is_shown_as_kv_over_mlx5_0_to_3():
    node, pd = _worker("prefill", "nixl", "infiniband")
    said = _said(request(nodes=(node,), pd=pd))
    assert said[0] == (
        "KV transfer: NixlConnector either over InfiniBand on mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1"
    )
    assert said[1].endswith(
        "UCX  INFO  ep_cfg[1]: tag(self/memory cuda_copy/cuda rc_mlx5/mlx5_0:1 rc_mlx5/mlx5_1:1"
        " rc_mlx5/mlx5_2:1 rc_mlx5/mlx5_3:1)"
    )
    found = read_kv_transport(["NCCL INFO Using network IB", *said])
    assert found is not None and label(found) == "KV over mlx5_0..3 (IB)"
    assert kv_warning("chat-pd", "h100-a-01", found) is None
    alone = read_kv_transport(said[1:])  # what a real NIXL worker prints: UCX's line only
    assert alone is not None and label(alone) == "KV over mlx5_0..3 (RDMA)"


UCX_113 = (
    "[1796000000.000001] [h100-a-02:4242:0]      ucp_worker.c:1877 UCX  INFO  ep_cfg[2]:"
    " tag(self/memory0 cuda_copy/cuda rc_mlx5/mlx5_0:1)"
)
"""An endpoint line in the form UCX 1.13 prints at `UCX_LOG_LEVEL=info` (written here)."""


def test_ucxs_own_endpoint_line_is_read_as_the_transports_word():
    found = read_kv_transport([UCX_113])
    assert found is not None and (found.kind, found.devices) == ("RDMA", ("mlx5_0",))
    assert label(found) == "KV over mlx5_0 (RDMA)"


def test_one_endpoint_over_tcp_among_rdma_ones_is_the_red_line():
    tcp = UCX_113.replace("ep_cfg[2]", "ep_cfg[3]").replace("rc_mlx5/mlx5_0:1", "tcp/eno1")
    found = read_kv_transport([UCX_113, tcp])
    assert found is not None and found.over_tcp and label(found) == "KV over TCP (eno1)"
    assert kv_warning("chat-pd", "h100-a-02", found) is not None
    nvlink = UCX_113.replace("rc_mlx5/mlx5_0:1", "cuda_ipc/cuda")
    inside = read_kv_transport([nvlink])
    assert inside is not None and label(inside) == "KV over NVLink"


def test_a_mooncake_decode_worker_of_sglang_names_its_ib_devices():
    node, pd = _worker(
        "decode", "mooncake", "infiniband", version="0.5.3",
        program=("python3", "-m", "sglang.launch_server"),
    )  # fmt: skip
    said = _said(request(nodes=(node,), engine="sglang", pd=pd))
    found = read_kv_transport(said)
    assert found is not None and (found.connector, found.role) == ("mooncake", "decode")
    assert label(found) == "KV over mlx5_0..3 (RDMA)"


def test_a_roce_rail_is_named_roce_and_nvlink_inside_a_rack_has_no_devices():
    roce = (FabricAdapter("mlx5_4", 1, "Ethernet", gid_index=3),)
    node, pd = _worker("prefill", "nixl", "roce", rails=roce)
    found = read_kv_transport(_said(request(nodes=(node,), pd=pd)))
    assert found is not None and label(found) == "KV over mlx5_4 (RoCE)"
    node, pd = _worker("decode", "nixl", "nvlink", rails=())
    found = read_kv_transport(_said(request(nodes=(node,), pd=pd)))
    assert found is not None and label(found) == "KV over NVLink"


def test_a_worker_whose_kv_falls_back_to_tcp_gets_a_red_line():
    node, pd = _worker("decode", "mooncake", "tcp", rails=())
    found = read_kv_transport(_said(request(nodes=(node,), pd=pd)))
    assert found is not None and found.over_tcp
    assert label(found) == "KV over TCP (eno1)"
    warning = kv_warning("chat-pd", "h100-a-02", found)
    assert warning is not None and warning.startswith(
        "chat-pd on h100-a-02: the KV cache crosses TCP (eno1), not the fabric's rails"
    )


def test_a_replica_doing_both_says_nothing_of_a_kv_transfer():
    main = build_launch(request()).shards[0].main
    engine = parse_engine_argv("vllm", list(main.argv))
    assert engine["pd"] is None and transfer_lines(engine, dict(main.env)) == []
    assert read_kv_transport(["NCCL INFO NET/IB : Using [0]mlx5_0:1/IB"]) is None


def test_a_run_of_adapters_is_shortened_only_when_it_is_one():
    assert device_span(["mlx5_0", "mlx5_1", "mlx5_2"]) == "mlx5_0..2"
    assert device_span(["mlx5_0", "mlx5_2", "mlx5_3"]) == "mlx5_0, mlx5_2, mlx5_3"
    assert device_span(["mlx5_0", "mlx5_1"]) == "mlx5_0, mlx5_1"


def test_the_replica_row_shows_the_kv_path_beside_nccls_and_alone_on_one_card():
    node, pd = _worker("decode", "nixl", "infiniband")
    found = read_kv_transport(_said(request(nodes=(node,), pd=pd)))
    assert found is not None
    kv = kv_dict(found)
    shards = (
        ShardView("h100-a-01", 0, "s0", ("GPU-0", "GPU-1"), "running"),
        ShardView("h100-a-02", 0, "s1", ("GPU-0",), "running"),
    )
    view = ReplicaView(
        "chat-pd-decode-1",
        {"engine": "vllm"},
        shards,
        "ready",
        transports={"s0": {"label": "NVLink", "kv": kv}, "s1": {"label": None, "kv": kv}},
    )
    assert replica_row(view).transport == "KV over mlx5_0..3 (IB), NVLink · KV over mlx5_0..3 (IB)"
    assert shard_transport(view, shards[1]) == "KV over mlx5_0..3 (IB)"
