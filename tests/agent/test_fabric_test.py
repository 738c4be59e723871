"""The agent's fabric-test halves, run as real processes: the TCP fallback measured
between two of them on loopback, and simulated ib_write_bw read by the core's parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from llmgw_agent.fabric_test import HalfOptions, fabric_client, ib_write_bw_argv
from llmgw_agent.op_args import OpError
from llmgw_agent.sim.profiles import write_profile

from llmgw_core.fabric import AdapterEnd, judge_rail, pair_rails
from llmgw_core.fabric_perftest import parse_ib_write_bw, read_tcp_result

AGENT_ROOT = Path(__file__).resolve().parents[2] / "agent"

HALF = """
import json, sys
sys.path.insert(0, {root!r})
from llmgw_agent.fabric_test import fabric_client, fabric_server
def emit(event):
    print(json.dumps({{"event": event}}), flush=True)
half = fabric_server if sys.argv[1] == "server" else fabric_client
replay = sys.argv[3] if len(sys.argv) > 3 else None
print(json.dumps({{"result": half(json.loads(sys.argv[2]), emit, replay=replay)}}), flush=True)
"""


def start_half(side: str, args: dict, replay: Path | None = None) -> subprocess.Popen[str]:
    """One half as its own process: `python -S` with only `agent/` on the path."""
    argv = [sys.executable, "-S", "-c", HALF.format(root=str(AGENT_ROOT)), side, json.dumps(args)]
    if replay is not None:
        argv.append(str(replay))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMGW_", "PYTHON"))}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)


def read_message(proc: subprocess.Popen[str]) -> dict:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the half exited with {proc.wait()} and said nothing"
    return json.loads(line)


def run_pair(
    server_args: dict, client_args: dict, replay_a=None, replay_b=None
) -> tuple[dict, dict]:
    server = start_half("server", server_args, replay_a)
    try:
        listening = read_message(server)["event"]
        assert listening["listening"] is True
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
    server_result, client_result = run_pair(args, {"method": "tcp", "duration_s": 0.5})
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
    server_result, client_result = run_pair(args, args, node_a, node_b)
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
        server_result, client_result = run_pair(args, args, node_a, node_b)
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


def test_a_client_with_no_server_is_refused_with_a_sentence() -> None:
    args = {"method": "tcp", "server_address": "127.0.0.1", "port": 1, "duration_s": 0.2}
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
