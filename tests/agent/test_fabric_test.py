"""The agent's fabric-test halves, run as real processes: the TCP fallback measured
between two of them on loopback, and simulated ib_write_bw read by the core's parser."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from ports import free_port

from llmgw_agent.discover import collect_facts
from llmgw_agent.fabric.run import HalfOptions, fabric_client, fabric_server, ib_write_bw_argv
from llmgw_agent.op_args import OpError
from llmgw_agent.sim.profiles import write_profile
from llmgw_core.fabric.perftest import parse_ib_write_bw, read_tcp_result
from llmgw_core.fabric.run import (
    FabricNode,
    RailSettings,
    adapter_ends,
    run_all_reduce,
    run_matrix,
    run_pair,
)
from llmgw_core.fabric.verdicts import AdapterEnd, judge_rail, pair_rails
from llmgw_core.fleet.client import AgentClient, AgentLost
from llmgw_core.fleet.loopback import LoopbackSshd

AGENT_ROOT = Path(__file__).resolve().parents[2] / "agent"

HALF = """
import json, sys
sys.path.insert(0, {root!r})
from llmgw_agent.fabric.run import fabric_client, fabric_server
def emit(event):
    print(json.dumps({{"event": event}}), flush=True)
half = fabric_server if sys.argv[1] == "server" else fabric_client
replay = sys.argv[2] if len(sys.argv) > 2 else None
args = json.loads(sys.stdin.readline())
print(json.dumps({{"result": half(args, emit, replay=replay)}}), flush=True)
"""

SECRET = "5e" * 32
"""The test's secret, as the console makes one per test (`llmgw_core.fabric.run.new_secret`)."""


def start_half(side: str, args: dict, replay: Path | None = None) -> subprocess.Popen[str]:
    """One half as its own process: `python -S` with only `agent/` on the path.

    Its arguments (the secret among them) come on stdin, as over the agent's channel.
    """
    argv = [sys.executable, "-S", "-c", HALF.format(root=str(AGENT_ROOT)), side]
    if replay is not None:
        argv.append(str(replay))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMGW_", "PYTHON"))}
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"secret": SECRET, **args}) + "\n")
    proc.stdin.close()
    return proc


def read_message(proc: subprocess.Popen[str]) -> dict:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the half exited with {proc.wait()} and said nothing"
    return json.loads(line)


def run_halves(
    server_args: dict, client_args: dict, replay_a=None, replay_b=None, before=None
) -> tuple[dict, dict]:
    """Both halves as processes; `before(port)` runs once the server listens, before the client."""
    server = start_half("server", server_args, replay_a)
    try:
        listening = read_message(server)["event"]
        assert listening["listening"] is True
        if before is not None:
            before(listening["port"])
        client_args = {
            **client_args,
            "port": listening["port"],
            "server_address": listening["address"] if replay_a else "127.0.0.1",
        }
        client = start_half("client", client_args, replay_b)
        client_result = read_message(client)["result"]
        server_result = read_message(server)["result"]
        assert client.wait(timeout=20) == 0
        assert server.wait(timeout=20) == 0
    finally:
        for proc in (server,):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return server_result, client_result


def test_the_tcp_fallback_is_measured_between_two_processes_and_labelled_tcp() -> None:
    args = {"method": "tcp", "duration_s": 0.5, "bind_address": "127.0.0.1"}
    server_result, client_result = run_halves(args, {"method": "tcp", "duration_s": 0.5})
    received = read_tcp_result(server_result)
    sent = read_tcp_result(client_result)
    assert server_result["method"] == client_result["method"] == "tcp"
    assert received.side == "server"
    assert received.bytes_moved == sent.bytes_moved > 0
    assert received.gbps > 0
    print(f"TCP over loopback: {received.gbps:.1f} Gb/s ({received.bytes_moved} bytes)")


def replay_node(path: Path, *, degraded: str | None = None, down: str | None = None) -> Path:
    """A simulated HGX H100 node, written by the demo's own profile."""
    options = {"degraded_rail": degraded} if degraded else {}
    write_profile("hgx-h100", path, hostname=path.name, **options)
    if down:
        state = path / "sys" / "class" / "infiniband" / down / "ports" / "1" / "state"
        state.write_text("1: DOWN\n")
    return path


def test_a_simulated_rail_prints_ib_write_bw_text_the_core_reads(tmp_path: Path) -> None:
    node_a = replay_node(tmp_path / "h100-a")
    node_b = replay_node(tmp_path / "h100-b")
    args = {"device": "mlx5_0", "duration_s": 1}
    server_result, client_result = run_halves(args, args, node_a, node_b)
    assert client_result["method"] == "ib_write_bw"
    assert client_result["simulated"] is True
    run = parse_ib_write_bw(client_result["output"])
    assert run.side == "client"
    assert run.device == "mlx5_0"
    assert run.unit == "Gb/sec"
    assert run.duration_mode
    assert run.average_gbps == pytest.approx(388.8, abs=0.1)
    assert parse_ib_write_bw(server_result["output"]).side == "server"


def test_the_degraded_simulated_rail_fails_with_its_ratio(tmp_path: Path) -> None:
    node_a = replay_node(tmp_path / "h100-a")
    node_b = replay_node(tmp_path / "h100-b", degraded="mlx5_3")
    ends = {f"mlx5_{i}": AdapterEnd(name=f"mlx5_{i}", state="ACTIVE") for i in range(4)}
    pairs, _ = pair_rails("h100-a", list(ends), ends, "h100-b", list(ends), ends, 400)
    verdicts = {}
    for pair in (pairs[0], pairs[3]):
        args = {"device": pair.adapter_a.name, "duration_s": 1}
        server_result, client_result = run_halves(args, args, node_a, node_b)
        result = judge_rail(pair, server_result["output"], client_result["output"])
        verdicts[pair.adapter_a.name] = (result.verdict, round(result.ratio or 0, 2))
    assert verdicts == {"mlx5_0": ("pass", 0.97), "mlx5_3": ("fail", 0.6)}


def test_a_simulated_down_port_prints_what_ib_write_bw_would(tmp_path: Path) -> None:
    node = replay_node(tmp_path / "h100-b", down="mlx5_2")
    proc = start_half("client", {"device": "mlx5_2", "server_address": "127.0.0.1"}, node)
    result = read_message(proc)["result"]
    proc.wait(timeout=10)
    assert result["exit_code"] == 1
    assert parse_ib_write_bw(result["output"]).failure == "down"


class Strangers:
    """Another user of the node, connecting to a server half's port before its client does."""

    def __init__(self) -> None:
        self.sockets: list[socket.socket] = []

    def connect(self, port: int) -> None:
        """Three at once: silent, 64 zero bytes (an answer's length), and a fake sim report."""
        for payload in (b"", b"\0" * 64, json.dumps({"gbps": 9999.0}).encode() + b"\n"):
            stranger = socket.create_connection(("127.0.0.1", port), timeout=5)
            stranger.sendall(payload)
            self.sockets.append(stranger)

    def were_dropped(self) -> bool:
        """The two that answered wrongly were closed (the silent one may still wait)."""
        dropped = []
        for stranger in self.sockets[1:]:
            stranger.settimeout(10)
            with contextlib.suppress(ConnectionResetError):
                while stranger.recv(4096):  # the server's hello, then its close
                    pass
            dropped.append(True)
        return all(dropped)

    def close(self) -> None:
        for stranger in self.sockets:
            stranger.close()


def test_strangers_who_connect_first_neither_end_nor_skew_a_tcp_test() -> None:
    strangers = Strangers()
    try:
        args = {"method": "tcp", "duration_s": 0.5, "bind_address": "127.0.0.1"}
        server_result, client_result = run_halves(
            args, {"method": "tcp", "duration_s": 0.5}, before=strangers.connect
        )
        assert strangers.were_dropped()
    finally:
        strangers.close()
    received, sent = read_tcp_result(server_result), read_tcp_result(client_result)
    assert received.bytes_moved == sent.bytes_moved > 0  # the client's bytes, and only those
    assert server_result["stopped"] is None
    assert SECRET not in json.dumps([server_result, client_result])


def test_a_stranger_cannot_pass_for_the_peer_of_a_simulated_rail(tmp_path: Path) -> None:
    node_a = replay_node(tmp_path / "h100-a")
    node_b = replay_node(tmp_path / "h100-b", degraded="mlx5_0")
    strangers = Strangers()
    try:
        args = {"device": "mlx5_0", "duration_s": 1}
        server_result, client_result = run_halves(
            args, args, node_a, node_b, before=strangers.connect
        )
    finally:
        strangers.close()
    # The peer's degraded adapter sets the figure, not the stranger's 9999 Gb/s.
    assert parse_ib_write_bw(server_result["output"]).average_gbps == pytest.approx(240, abs=1)
    assert parse_ib_write_bw(client_result["output"]).average_gbps == pytest.approx(240, abs=1)


def test_a_client_refuses_a_server_that_does_not_hold_the_secret() -> None:
    with socket.socket() as impostor:
        impostor.bind(("127.0.0.1", 0))
        impostor.listen(1)
        port = impostor.getsockname()[1]

        def answer() -> None:
            connection, _ = impostor.accept()
            with connection:
                connection.sendall(b"llmgw-fabric-1\n" + b"\1" * 32)
                connection.recv(64)
                connection.sendall(b"\0" * 32)

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        args = {"method": "tcp", "server_address": "127.0.0.1", "port": port, "secret": SECRET}
        with pytest.raises(OpError, match=r"is not this test's server half") as refused:
            fabric_client({**args, "duration_s": 0.2}, lambda event: None)
        thread.join(5)
    assert SECRET not in refused.value.message


def test_a_half_that_opens_or_reaches_a_port_needs_the_tests_secret() -> None:
    with pytest.raises(OpError, match=r"argument 'secret' is required"):
        fabric_server({"method": "tcp", "duration_s": 0.2}, lambda event: None)
    with pytest.raises(OpError, match=r"argument 'secret' must be 16 bytes or more"):
        HalfOptions({"method": "tcp", "secret": "00ff"}, "server")
    # ib_write_bw's own port is perftest's: its argv never holds the secret.
    options = HalfOptions({"device": "mlx5_0", "secret": SECRET}, "server")
    assert SECRET not in " ".join(ib_write_bw_argv(options, numactl=False))


def test_a_client_with_no_server_is_refused_with_a_sentence() -> None:
    args = {"method": "tcp", "server_address": "127.0.0.1", "port": 1, "duration_s": 0.2}
    args["secret"] = SECRET
    with pytest.raises(OpError, match=r"cannot reach 127\.0\.0\.1:1 over TCP"):
        fabric_client(args, lambda event: None)


def test_ib_write_bw_gets_the_same_options_on_both_sides_and_numa_pinning() -> None:
    args = {"device": "mlx5_3", "gid_index": 3, "port": 18518, "numa_node": 1, "duration_s": 10}
    server = ib_write_bw_argv(HalfOptions(args, "server"), numactl=True)
    client = ib_write_bw_argv(HalfOptions({**args, "server_address": "10.0.0.7"}, "client"), True)
    assert server == [
        "numactl", "--cpunodebind=1", "--membind=1",
        "ib_write_bw", "-d", "mlx5_3", "-i", "1", "-x", "3", "-p", "18518",
        "--report_gbits", "-s", "8388608", "-D", "10", "-q", "2", "-F",
    ]  # fmt: skip
    assert client == [*server, "10.0.0.7"]


def test_an_adapter_name_that_could_reach_a_shell_is_refused() -> None:
    with pytest.raises(OpError, match="is not an adapter name"):
        HalfOptions({"device": "mlx5_0; rm -rf /"}, "server")


# --- the core driving real agents over real SSH -------------------------------------

WITH_FABRIC_OPS = """
import sys
from llmgw_agent import protocol
from llmgw_agent.fabric import allreduce as fabric_allreduce
from llmgw_agent.fabric import run as fabric_test

_init = protocol.Server.__init__


def _with_fabric_ops(self, channel, replay):
    _init(self, channel, replay)
    self.ops.setdefault(
        "fabric.probe", lambda args, stream: fabric_test.fabric_probe(args, self.replay)
    )
    self.ops.setdefault(
        "fabric.server",
        lambda args, stream: fabric_test.fabric_server(
            args, stream.emit, stream.cancelled, self.replay
        ),
    )
    self.ops.setdefault(
        "fabric.client",
        lambda args, stream: fabric_test.fabric_client(
            args, stream.emit, stream.cancelled, self.replay
        ),
    )
    self.ops.setdefault(
        "fabric.all_reduce",
        lambda args, stream: fabric_allreduce.all_reduce(
            args, stream.emit, stream.cancelled, self.replay
        ),
    )


protocol.Server.__init__ = _with_fabric_ops
sys.exit(protocol.serve_main(sys.argv[1:]))
"""
"""The agent with the fabric ops, exactly as `protocol.py` is to register them."""

AN_AGENT_OF_BEFORE = """
import sys
from llmgw_agent import protocol

_init = protocol.Server.__init__


def _without_fabric_ops(self, channel, replay):
    _init(self, channel, replay)
    for op in [name for name in self.ops if name.startswith("fabric.")]:
        del self.ops[op]


protocol.Server.__init__ = _without_fabric_ops
sys.exit(protocol.serve_main(sys.argv[1:]))
"""
"""An agent from before the fabric ops existed."""


class SshAgents:
    """Real agents behind real loopback SSH servers, one per simulated node."""

    def __init__(self, tmp_path: Path, state_dir: Path) -> None:
        self.tmp_path = tmp_path
        self.state_dir = state_dir
        self.key = asyncssh.generate_private_key("ssh-ed25519")
        self.servers: list[LoopbackSshd] = []
        self.connections: list[asyncssh.SSHClientConnection] = []
        self.clients: dict[str, AgentClient] = {}

    async def start(self, name: str, capture: Path, *, ops: bool = True) -> None:
        server = LoopbackSshd(
            home=self.tmp_path / name / "home",
            host_key=asyncssh.generate_private_key("ssh-ed25519"),
            authorized_keys=self.key.export_public_key().decode(),
            env={"LLMGW_AGENT_STATE": str(self.state_dir)},
        )
        port = await server.start()
        self.servers.append(server)
        connection = await asyncssh.connect(
            "127.0.0.1", port, known_hosts=None, client_keys=[self.key], config=None
        )
        self.connections.append(connection)
        command = " ".join(
            [
                f"PYTHONPATH={shlex.quote(str(AGENT_ROOT))}",
                f"exec {shlex.quote(sys.executable)} -S -c "
                + shlex.quote(WITH_FABRIC_OPS if ops else AN_AGENT_OF_BEFORE),
                f"--replay {shlex.quote(str(capture))}",
            ]
        )
        self.clients[name] = await AgentClient.start(name, connection, command)

    def link_of(self, name: str) -> AgentClient:
        if name not in self.clients:
            raise AgentLost(f"{name} is unreachable: connection refused")
        return self.clients[name]

    async def stop(self) -> None:
        for client in self.clients.values():
            await client.close()
        for connection in self.connections:
            connection.close()
        for server in self.servers:
            await server.stop()


def fabric_node(name: str, capture: Path, *, on_fabric: bool = True) -> FabricNode:
    facts = collect_facts(replay=str(capture))
    ends = adapter_ends(facts)
    return FabricNode(
        name=name,
        address="127.0.0.1",
        hcas=tuple(sorted(ends)) if on_fabric else (),
        rate_gbps=400 if on_fabric else None,
        adapters=ends,
    )


def run_with_agents(tmp_path: Path, state_dir: Path, body) -> Any:
    """Start agents for h100-a, h100-b (rail mlx5_5 degraded) and cpu-01, run `body`."""
    captures = {
        "h100-a": write_profile("hgx-h100", tmp_path / "h100-a-cap", hostname="h100-a"),
        "h100-b": write_profile(
            "hgx-h100", tmp_path / "h100-b-cap", hostname="h100-b", degraded_rail="mlx5_5"
        ),
        "cpu-01": write_profile("cpu", tmp_path / "cpu-cap", hostname="cpu-01"),
    }
    nodes = {
        name: fabric_node(name, capture, on_fabric=name != "cpu-01")
        for name, capture in captures.items()
    }

    async def main() -> Any:
        agents = SshAgents(tmp_path, state_dir)
        try:
            await asyncio.gather(*(agents.start(n, c) for n, c in captures.items()))
            return await body(nodes, agents.link_of)
        finally:
            await agents.stop()

    return asyncio.run(main())


def test_two_simulated_h100_nodes_pass_every_rail_but_the_degraded_one(
    tmp_path: Path, state_dir: Path
) -> None:
    async def body(nodes, link_of):
        settings = RailSettings(duration_s=1, concurrent_rails=True)
        return await run_pair(nodes["h100-a"], nodes["h100-b"], link_of, settings)

    rows = run_with_agents(tmp_path, state_dir, body)
    assert [(r.adapter_a, r.verdict) for r in rows] == [
        *((f"mlx5_{i}", "pass") for i in range(5)),
        ("mlx5_5", "fail"),
        *((f"mlx5_{i}", "pass") for i in (6, 7)),
    ]
    degraded = rows[5]
    assert degraded.ratio == pytest.approx(0.6, abs=0.01)
    assert degraded.reason == "240.0 of 400 Gb/s (60%)"
    assert {r.method for r in rows} == {"ib_write_bw"}
    assert all("BW average[Gb/sec]" in r.raw_client for r in rows)


def test_a_node_without_perftest_is_measured_over_tcp_and_labelled_so(
    tmp_path: Path, state_dir: Path
) -> None:
    async def body(nodes, link_of):
        settings = RailSettings(duration_s=0.5)
        return await run_matrix([nodes["h100-a"], nodes["cpu-01"]], link_of, settings)

    rows = run_with_agents(tmp_path, state_dir, body)
    assert len(rows) == 1
    tcp = rows[0]
    assert (tcp.method, tcp.verdict, tcp.adapter_a) == ("tcp", "untested", None)
    assert tcp.measured_gbps is not None and tcp.measured_gbps > 0
    assert tcp.reason == (
        "TCP over the management network, not the fabric: h100-a and cpu-01 share no fabric"
    )


def test_an_unreachable_node_fails_its_pairs_with_the_reason(
    tmp_path: Path, state_dir: Path
) -> None:
    async def body(nodes, link_of):
        gone = FabricNode(name="h100-c", address="127.0.0.1", hcas=nodes["h100-a"].hcas)
        return await run_matrix([nodes["h100-a"], gone], link_of, RailSettings(duration_s=1))

    rows = run_with_agents(tmp_path, state_dir, body)
    assert [(r.verdict, r.reason) for r in rows] == [
        ("fail", "unreachable: h100-c is unreachable: connection refused")
    ]


def test_all_reduce_across_the_two_h100_nodes_is_judged_against_the_slowest_node(
    tmp_path: Path, state_dir: Path
) -> None:
    """The degraded rail slows every ring: the rail test's figures explain the all_reduce."""

    async def body(nodes, link_of):
        pair = [nodes["h100-b"], nodes["h100-a"]]
        settings = RailSettings(duration_s=1, concurrent_rails=True)
        rails = await run_pair(pair[0], pair[1], link_of, settings)
        hca = "=" + ",".join(f"{name}:1" for name in pair[0].hcas)
        env = {"NCCL_IB_HCA": hca}
        rated = await run_all_reduce(link_of("h100-b"), pair, gpus_per_node=8, env=env)
        informed = await run_all_reduce(
            link_of("h100-b"), pair, gpus_per_node=8, env=env, measured=rails
        )
        return rated, informed

    (run, against_rated), (_, against_measured) = run_with_agents(tmp_path, state_dir, body)
    assert run.rank_count == 16
    assert run.transport.nodes == 2
    assert run.transport.label == "IB + GDR"
    assert [a.name for a in run.transport.adapters] == [f"mlx5_{i}" for i in range(8)]
    assert against_rated.expected_gbs == 400
    assert against_rated.verdict == "fail"
    assert against_measured.expected_gbs == pytest.approx((7 * 388.8 + 240) / 8, abs=0.5)
    assert against_measured.ratio is not None and against_measured.ratio > against_rated.ratio


# --- the headless step on the demo fleet ---------------------------------------------


def test_the_fabric_test_step_on_the_demo_h100s_and_a_cpu_node(tmp_path: Path) -> None:
    """Through the real inventory, SSH, deployed agent and step: rails, then TCP."""
    from llmgw_core.fleet.sim.demo import demo_nodes, start_demo_fleet
    from llmgw_core.script.registry import StepContext, all_steps
    from llmgw_core.script.steps.fabric import FabricTestArgs

    wanted = ("h100-a-01", "h100-a-02", "cpu-01")

    async def main() -> tuple[Any, Any] | None:
        demo = await start_demo_fleet(
            tmp_path / "demo", nodes=[n for n in demo_nodes() if n.name in wanted]
        )
        ctx = StepContext(
            script_dir=tmp_path,
            described_fleet=None,
            inventory=str(demo.root / "inventory.yaml"),
            demo=False,
        )
        try:
            fleet = await ctx.live_fleet()
            if "fabric.server" not in fleet.client("h100-a-01").hello.get("capabilities", []):
                return None
            step = all_steps()["fabric-test"]
            rails = await step.call(
                FabricTestArgs(
                    nodes=["h100-a-01", "h100-a-02"], duration_s=1, concurrent_rails=True
                ),
                ctx,
            )
            tcp = await step.call(
                FabricTestArgs(nodes=["h100-a-01", "cpu-01"], duration_s=0.5), ctx
            )
            return rails, tcp
        finally:
            await ctx.close()
            await demo.stop()

    outcomes = asyncio.run(main())
    if outcomes is None:
        pytest.skip("the agent's protocol does not register fabric.probe/server/client yet")
    rails, tcp = outcomes
    assert not rails.ok
    assert rails.exit_code == 1
    assert rails.error.startswith("1 rail(s) fail, first h100-a-01–h100-a-02 mlx5_5: 240.0 of 400")
    rows = rails.result["rails"]
    assert rails.result["fabric"] == "ib-a"
    assert [(r["adapter_a"], r["verdict"]) for r in rows] == [
        (f"mlx5_{i}", "fail" if i == 5 else "pass") for i in range(8)
    ]
    assert rows[5]["ratio"] == 0.6
    assert {r["method"] for r in rows} == {"ib_write_bw"}
    assert rows[0]["raw"]["client"].count("BW average[Gb/sec]") == 1
    assert tcp.ok
    (row,) = tcp.result["rails"]
    assert (row["method"], row["verdict"], row["rated_gbps"]) == ("tcp", "untested", None)
    assert row["measured_gbps"] > 0


# --- the real ib_write_bw path, against a stand-in for perftest ------------------------

FAKE_PERFTEST = """# A stand-in for perftest's ib_write_bw: the same command line, a real
# out-of-band TCP port, and a result table in --report_gbits layout.
import socket, sys
args = sys.argv[1:]
port = int(args[args.index("-p") + 1])
device = args[args.index("-d") + 1]
with open({log!r}, "a") as log:
    log.write(" ".join(sys.argv) + "\\n")
table = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\\n"
         " 8388608    2300             0.00               {gbps}                0.005855\\n")
server = args[-1] == "-F"  # a client's command line ends with the server's address
if server:
    print("************************************")
    print("* Waiting for client to connect... *")
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(1)
    connection, _ = listener.accept()
    connection.recv(16)
else:
    try:
        connection = socket.create_connection((args[-1], port), timeout=5)
    except OSError:
        print(" Couldn't connect to %s:%d" % (args[-1], port))
        sys.exit(1)
    connection.sendall(b"go")
print(" Device         : " + device)
print(table, end="")
"""


@pytest.fixture
def fake_perftest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`ib_write_bw` on PATH is our stand-in; returns the file its command lines go to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv.log"
    program = tmp_path / "fake_ib_write_bw.py"
    program.write_text(FAKE_PERFTEST.format(log=str(log), gbps="392.84"))
    script = bin_dir / "ib_write_bw"  # a shell wrapper: a long venv path would break a shebang
    script.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(program))} "$@"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return log


def test_the_server_half_says_listening_once_perftest_holds_its_port(fake_perftest: Path) -> None:
    port = free_port()
    args = {"device": "mlx5_2", "port": port, "duration_s": 1}
    events: list[dict] = []
    answers: dict[str, dict] = {}
    listening = threading.Event()

    def emit(event: dict) -> None:
        events.append(event)
        listening.set()

    server = threading.Thread(
        target=lambda: answers.setdefault("server", fabric_server(args, emit)), daemon=True
    )
    server.start()
    assert listening.wait(15), "the server half never said it was listening"
    answers["client"] = fabric_client({**args, "server_address": "127.0.0.1"}, lambda e: None)
    server.join(15)
    assert events == [{"listening": True, "method": "ib_write_bw", "port": port, "address": None}]
    for side in ("server", "client"):
        answer = answers[side]
        assert answer["exit_code"] == 0
        assert answer["stopped"] is None
        assert parse_ib_write_bw(answer["output"]).average_gbps == pytest.approx(392.84)
    assert answers["server"]["argv"][:3] == ["ib_write_bw", "-d", "mlx5_2"]
    assert fake_perftest.read_text().count("--report_gbits") == 2


def test_a_cancelled_server_half_is_killed_and_says_so(fake_perftest: Path) -> None:
    cancelled = threading.Event()
    listening = threading.Event()
    args = {"device": "mlx5_0", "port": free_port(), "duration_s": 1}
    answer: dict[str, dict] = {}
    server = threading.Thread(
        target=lambda: answer.setdefault(
            "server", fabric_server(args, lambda e: listening.set(), cancelled)
        ),
        daemon=True,
    )
    server.start()
    assert listening.wait(15)
    cancelled.set()
    server.join(15)
    assert answer["server"]["stopped"] == "cancelled"
    assert "Waiting for client to connect" in answer["server"]["output"]


def test_a_client_whose_server_is_gone_reads_as_unreachable(fake_perftest: Path) -> None:
    args = {"device": "mlx5_0", "port": free_port(), "server_address": "127.0.0.1"}
    answer = fabric_client(args, lambda e: None)
    assert answer["exit_code"] == 1
    assert parse_ib_write_bw(answer["output"]).failure == "unreachable"


def test_an_agent_without_the_fabric_ops_is_told_to_update(tmp_path: Path, state_dir: Path) -> None:
    """An old agent answers `unknown_op`: the row says to update it, not that it is down."""
    capture = write_profile("hgx-h100", tmp_path / "old-cap", hostname="old")

    async def main() -> list[Any]:
        agents = SshAgents(tmp_path, state_dir)
        try:
            await agents.start("old", capture, ops=False)
            old = fabric_node("old", capture)
            return await run_pair(old, old, agents.link_of, RailSettings(duration_s=1))
        finally:
            await agents.stop()

    (row,) = asyncio.run(main())
    assert (row.verdict, row.reason) == (
        "fail",
        "the agent cannot run fabric tests: update it (the console ships a newer one)",
    )


def _tools_on_path(folder: Path, mpirun_body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node with nccl-tests installed: `mpirun` and `all_reduce_perf` are real scripts."""
    folder.mkdir()
    for name, body in (("mpirun", mpirun_body), ("all_reduce_perf", "exit 0")):
        script = folder / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")


def test_a_real_all_reduce_run_returns_what_mpirun_printed(tmp_path, monkeypatch):
    from llmgw_agent.fabric.allreduce import all_reduce

    _tools_on_path(tmp_path / "bin", 'echo "# nccl-tests: $*"', monkeypatch)
    result = all_reduce({"hosts": ["n1", "n2"], "gpus_per_node": 2})
    assert (result["exit_code"], result["stopped"], result["simulated"]) == (0, None, False)
    assert result["output"].startswith("# nccl-tests: -np 4 -H n1:2,n2:2")


def test_an_all_reduce_past_its_timeout_is_stopped_and_says_so(tmp_path, monkeypatch):
    from llmgw_agent.fabric.allreduce import all_reduce

    _tools_on_path(tmp_path / "bin", "echo started; exec sleep 30", monkeypatch)
    result = all_reduce({"hosts": ["n1"], "timeout_s": 1})
    assert result["stopped"] == "timeout"
    assert result["output"] == "started\n"
