"""Simulated fabric-test halves for replay mode (the demo fleet, the tests).

On a simulated node there is no adapter to drive. The two halves meet over
a real loopback socket (so an unreachable server is unreachable for real),
exchange the speed each side's simulated adapter allows, and print text in
`ib_write_bw`'s own `--report_gbits` layout, which the console reads with
the same parser as a real run. A profile's degraded rail shows its reduced
speed; a down or missing adapter prints what perftest prints for one.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any, Dict, Optional, Tuple

from llmgw_agent.discover.replayed_rails import replay_adapters
from llmgw_agent.fabric.half import (
    HANDSHAKES_AT_ONCE,
    Emit,
    HalfOptions,
    accept_peer,
    half_result,
    ib_write_bw_argv,
    listening_event,
    prove_to_server,
    stop_reason,
)

SIM_RUN_S = 0.3
"""A simulated run takes this long, whatever duration was asked: the demo should not wait."""


def _sim_failure(
    options: HalfOptions, replay: str
) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """This half's simulated adapter, or the text ib_write_bw prints when it cannot use it."""
    adapter = replay_adapters(replay).get(str(options.device))
    if adapter is None:
        return None, " IB device {} not found\n Unable to find the Infiniband/RoCE device\n".format(
            options.device
        )
    if adapter.get("state") not in (None, "ACTIVE"):
        return None, " Port number {} state is Down\n Couldn't set the link layer\n".format(
            options.ib_port
        )
    return adapter, None


def _sim_speed(adapter: Dict[str, Any]) -> float:
    """What this side's adapter can carry, in Gb/s."""
    return float(adapter["sim_gbps"])


def sim_server(
    options: HalfOptions, emit: Emit, cancelled: threading.Event, replay: str
) -> Dict[str, Any]:
    """The receiving half of a simulated `ib_write_bw`: a loopback socket that trades speeds.

    The rail runs at the slower of the two adapters the profiles describe, and
    the output reads as `ib_write_bw` prints it, so the core judges it unchanged.
    """
    secret = options.required_secret()
    adapter, failure = _sim_failure(options, replay)
    if adapter is None:
        return half_result(
            options,
            argv=ib_write_bw_argv(options, False),
            exit_code=1,
            output=failure,
            simulated=True,
        )
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(HANDSHAKES_AT_ONCE)
        options.port = listener.getsockname()[1]
        emit(listening_event(options, "127.0.0.1"))
        connection = accept_peer(listener, cancelled, options.accept_timeout_s, secret)
        if connection is None:
            return half_result(
                options,
                argv=ib_write_bw_argv(options, False),
                exit_code=1,
                output=_banner() + " no client connected\n",
                stopped=stop_reason(cancelled) or "timeout",
                simulated=True,
            )
        with connection:
            connection.settimeout(5.0)
            peer = _exchange(
                connection, {"gbps": _sim_speed(adapter), "link_layer": adapter.get("link_layer")}
            )
    gbps = min(_sim_speed(adapter), float(peer.get("gbps") or 0.0))
    output = _banner() + _sim_report(options, adapter, gbps)
    return half_result(
        options, argv=ib_write_bw_argv(options, False), exit_code=0, output=output, simulated=True
    )


def sim_client(options: HalfOptions, cancelled: threading.Event, replay: str) -> Dict[str, Any]:
    """The sending half of a simulated `ib_write_bw`: connects to `sim_server` and reports."""
    adapter, failure = _sim_failure(options, replay)
    argv = ib_write_bw_argv(options, False)
    if adapter is None:
        return half_result(options, argv=argv, exit_code=1, output=failure, simulated=True)
    secret = options.required_secret()
    try:
        connection = socket.create_connection((str(options.server_address), options.port), 5.0)
    except OSError:
        text = " Couldn't connect to {}:{}\nUnable to open file descriptor for socket connection Unable to init the socket connection\n".format(
            options.server_address, options.port
        )
        return half_result(options, argv=argv, exit_code=1, output=text, simulated=True)
    with connection:
        connection.settimeout(5.0)
        where = "{}:{}".format(options.server_address, options.port)
        prove_to_server(connection, secret, where)
        peer = _exchange(
            connection, {"gbps": _sim_speed(adapter), "link_layer": adapter.get("link_layer")}
        )
    time.sleep(min(SIM_RUN_S, options.duration_s))
    gbps = min(_sim_speed(adapter), float(peer.get("gbps") or 0.0))
    return half_result(
        options, argv=argv, exit_code=0, output=_sim_report(options, adapter, gbps), simulated=True
    )


def _exchange(connection: socket.socket, mine: Dict[str, Any]) -> Dict[str, Any]:
    """Send this side's figures as one JSON line and read the peer's."""
    connection.sendall((json.dumps(mine) + "\n").encode())
    received = b""
    while not received.endswith(b"\n"):
        chunk = connection.recv(4096)
        if not chunk:
            break
        received += chunk
    try:
        peer = json.loads(received.decode() or "{}")
    except ValueError:
        peer = {}
    return peer if isinstance(peer, dict) else {}


def _banner() -> str:
    line = "*" * 36
    return "\n{0}\n* Waiting for client to connect... *\n{0}\n".format(line)


def _sim_report(options: HalfOptions, adapter: Dict[str, Any], gbps: float) -> str:
    """A result in ib_write_bw's `--report_gbits` layout, with the simulated figure."""
    rule = "-" * 87
    roce = adapter.get("link_layer") == "Ethernet"
    link = "Ethernet" if roce else "IB"
    lines = [
        rule,
        "                    RDMA_Write BW Test",
        " Dual-port       : OFF          Device         : {}".format(options.device),
        " Number of qps   : {:<12} Transport type : IB".format(options.qps),
        " Connection type : RC           Using SRQ      : OFF",
        " Mtu             : 4096[B]",
        " Link type       : {}".format(link),
    ]
    if roce:
        lines.append(
            " GID index       : {}".format(
                options.gid_index if options.gid_index is not None else 3
            )
        )
    lines += [" Data ex. method : Ethernet", rule]
    if options.iterations is None:
        lines.append(" WARNING: BW peak won't be measured in this run.")
    lines.append(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]")
    msg_rate = gbps * 1e9 / 8 / options.size_bytes / 1e6
    iterations = options.iterations or max(1, int(msg_rate * 1e6 * options.duration_s))
    peak = 0.0 if options.iterations is None else gbps * 1.001
    lines.append(
        " {:<10} {:<16} {:<18.2f} {:<20.2f} {:.6f}".format(
            options.size_bytes, iterations, peak, gbps, msg_rate
        )
    )
    lines.append(rule)
    return "\n".join(lines) + "\n"
