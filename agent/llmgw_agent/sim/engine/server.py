"""The sim engine: a real process that stands in for vLLM, SGLang or llama.cpp.

`llmgw sim-engine --as vllm -- vllm serve MODEL --port 8000 …` reads the real
command line, prints start-up lines shaped like that engine's (NCCL's lines
reflecting the environment it was given), serves `/health` (503 while
loading, then 200), `/v1/models`, `/v1/chat/completions`, `/v1/completions`
and `/metrics` on 127.0.0.1 — over HTTPS when the command names a certificate
and key (`--ssl-certfile`/`--ssl-keyfile` and the other engines' spellings),
as the real engine would — and records the memory it holds on its simulated
cards in `sim_usage_dir()/<pid>.json` until it exits. In replay mode the
agent's supervisor runs it in place of the real binary (`engine.args.engine_kind`
says which commands). This module is the process: its cards, its loading, its
listeners and its exit; what it answers over HTTP is `engine.serving`'s.

Environment: `LLMGW_SIM_LOAD_S` (seconds of loading, default 1.5),
`LLMGW_SIM_TOKEN_S` (seconds per generated token, default `TOKEN_S`),
`LLMGW_SIM_FAIL` (a message: fail with it after loading half-way),
`LLMGW_SIM_CARD_MIB` (memory of one card, else from the replayed node).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import ssl
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

from llmgw_agent import paths
from llmgw_agent.sim.engine.args import KINDS, client_key, engine_kind, parse_engine_argv
from llmgw_agent.sim.engine.lines import (
    cpu_kv_plan,
    loading_lines,
    memory_plan,
    nccl_lines,
    ready_lines,
)
from llmgw_agent.sim.engine.serving import EngineHttpServer, SimHandler, SimState, tls_context
from llmgw_agent.sim.engine.stdout import say
from llmgw_agent.sim.engine.transfer import path_gbps, transfer_lines

DEFAULT_LOAD_S = 1.5
DEFAULT_CARD_MIB = 81559
"""An H100 80 GB's memory, when nothing better is known."""
_DEFAULT_WEIGHTS_BYTES = 16 * 1024**3


def _rail_gbps() -> Dict[str, float]:
    """Each adapter of the replayed node and the Gb/s it carries (a degraded rail's share of
    its rate, as its fabric test measures it); {} off a replayed node."""
    replay = paths.replay_dir()
    if replay is None:
        return {}
    from llmgw_agent.discover.replayed_rails import replay_adapters

    try:
        return {name: float(a["sim_gbps"]) for name, a in replay_adapters(str(replay)).items()}
    except (OSError, ValueError):
        return {}


def _card_gpus() -> List[str]:
    """The cards this engine runs on: the shard's claimed ids, else CUDA_VISIBLE_DEVICES."""
    listed = os.environ.get("LLMGW_SHARD_GPUS") or os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [gpu.strip() for gpu in listed.split(",") if gpu.strip()]


def _card_mib(gpus: List[str]) -> int:
    """The memory of one of this engine's cards: explicit, from the replayed node, or a default."""
    explicit = os.environ.get("LLMGW_SIM_CARD_MIB")
    if explicit and explicit.isdigit():
        return int(explicit)
    replay = paths.replay_dir()
    if replay is None:
        return DEFAULT_CARD_MIB
    from_facts = _card_mib_from_facts(str(replay), gpus)
    if from_facts:
        return from_facts
    try:
        text = (replay / "nvidia-smi-q-x.xml").read_text(errors="replace")
    except OSError:
        return DEFAULT_CARD_MIB
    totals = [
        int(found) for found in re.findall(r"<fb_memory_usage>\s*<total>\s*(\d+)\s*MiB", text)
    ]
    if not totals:
        return DEFAULT_CARD_MIB
    wanted = gpus[0] if gpus else "0"
    if wanted.isdigit() and int(wanted) < len(totals):
        return totals[int(wanted)]
    return totals[0]


_FACTS: dict = {}


def _replayed_facts(replay: str) -> Optional[dict]:
    """The replayed node's facts, read once (None, said once, when they cannot be read)."""
    if replay not in _FACTS:
        try:
            from llmgw_agent.discover import collect_facts

            _FACTS[replay] = collect_facts(replay=replay)
        except Exception as exc:  # discovery is another module's edge: say so, fall back
            say("WARNING sim engine could not read the replayed node's facts: {}".format(exc))
            _FACTS[replay] = None
    return _FACTS[replay]


def _topology() -> Optional[dict]:
    """The replayed node's card-to-card matrix (`nvlink` facts), None off a replayed node."""
    replay = paths.replay_dir()
    facts = _replayed_facts(str(replay)) if replay is not None else None
    return (facts or {}).get("nvlink") or None


def _numa_node_gib() -> float:
    """The first NUMA node's RAM of the replayed node (its `host.json`), else the host's."""
    from llmgw_agent.discover.host import read_host_json

    replay = paths.replay_dir()
    try:
        host = read_host_json(replay / "host.json", problems=[]) if replay is not None else {}
    except ValueError:  # not JSON, or not an object: the default below
        host = {}
    numa = host.get("numa_nodes") or []
    mib = numa[0]["memory_mib"] if numa else host.get("memory_mib")
    return mib / 1024.0 if mib else 64.0


def _card_mib_from_facts(replay: str, gpus: List[str]) -> Optional[int]:
    """The memory of the first GPU named, as the replayed node's facts tell it (MIG included)."""
    facts = _replayed_facts(replay)
    if facts is None:
        return None
    wanted = gpus[0] if gpus else "0"
    for gpu in facts.get("gpus", []):
        if wanted in (str(gpu.get("id")), gpu.get("label"), gpu.get("uuid")):
            return gpu.get("memory_mib")
    return None


def _weights(model: Optional[str]) -> tuple:
    """(weights bytes, shard file count) of a model path, or defaults when absent."""
    if not model or not os.path.exists(model):
        return _DEFAULT_WEIGHTS_BYTES, 4
    if os.path.isfile(model):
        return os.path.getsize(model), 1
    files = [
        path
        for path in Path(model).iterdir()
        if path.suffix in (".safetensors", ".bin", ".gguf", ".pt") and path.is_file()
    ]
    if not files:
        return _DEFAULT_WEIGHTS_BYTES, 4
    return sum(path.stat().st_size for path in files), len(files)


def _bind_host(requested: Optional[str]) -> str:
    """The sim serves on loopback only (a real engine's 0.0.0.0 is not ours to take)."""
    return requested if requested and requested.startswith("127.") else "127.0.0.1"


def _listen_forever(host: str, port: int, stop: threading.Event) -> socket.socket:
    """A bare TCP listener (the Ray head's or an RPC server's port), accepting and closing."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(16)
    listener.settimeout(0.2)

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            connection.close()

    threading.Thread(target=accept, daemon=True).start()
    return listener


def _write_usage(gpus: List[str], used_mib: int) -> Path:
    record = {
        "pid": os.getpid(),
        "gpus": gpus,
        "used_mib": used_mib,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    path = paths.sim_usage_dir() / "{}.json".format(os.getpid())
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(record))
    os.replace(str(temporary), str(path))
    return path


def run_engine(kind: str, real_argv: List[str]) -> int:
    """Be the engine the real argv names until SIGTERM; exit code like the real one."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: stop.set())
    engine = parse_engine_argv(kind, real_argv)
    # vLLM registers its adapter load and unload routes only with this set; SGLang always.
    engine["runtime_lora"] = kind == "sglang" or (
        os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "").lower() in ("1", "true")
    )
    load_s = float(os.environ.get("LLMGW_SIM_LOAD_S") or DEFAULT_LOAD_S)
    host = _bind_host(engine["host"])
    bound = "{}:{}".format(host, engine["port"])
    if kind in ("ray", "rpc-server"):
        return _run_listener(kind, engine, host, stop)
    gpus = _card_gpus()
    weights_bytes, shard_count = _weights(engine["model"])
    plan = memory_plan(engine, _card_mib(gpus), weights_bytes)
    cpu_kv = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "")
    if kind == "vllm" and not gpus and cpu_kv.isdigit():  # vLLM's CPU backend
        plan = cpu_kv_plan(engine, int(cpu_kv), weights_bytes, _numa_node_gib())
    state = SimState(engine, plan, client_key(kind, real_argv, os.environ))
    state.kv_gbps = path_gbps(engine, dict(os.environ), _rail_gbps())
    say(
        "INFO {} sim {} engine, model={} served as {!r}, tp={} pp={} nnodes={} node_rank={}".format(
            time.strftime("%m-%d %H:%M:%S"),
            kind,
            engine["model"],
            engine["served_name"],
            engine["tp"],
            engine["pp"],
            engine["nnodes"],
            engine["node_rank"],
        )
    )
    server = None
    if engine["serves_http"]:
        handler = type("BoundSimHandler", (SimHandler,), {"sim": state})
        tls = None
        if engine["ssl_certfile"] or engine["ssl_keyfile"]:
            try:
                tls = tls_context(engine["ssl_certfile"] or "", engine["ssl_keyfile"] or "")
            except (OSError, ssl.SSLError) as exc:
                say("ERROR: the SSL certificate or key cannot be loaded: {}".format(exc))
                return 1
        try:
            server = EngineHttpServer((host, engine["port"]), handler)
        except OSError as exc:
            say("ERROR: [Errno {}] could not bind {}: {}".format(exc.errno, bound, exc.strerror))
            return 1
        server.tls = tls
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    usage_path = _write_usage(gpus, int(plan["weights_gib"] * 1024))
    try:
        return _load_and_serve(engine, plan, state, load_s, bound, stop, gpus, shard_count)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        with contextlib.suppress(FileNotFoundError):
            usage_path.unlink()


def _load_and_serve(
    engine: dict,
    plan: dict,
    state: SimState,
    load_s: float,
    bound: str,
    stop: threading.Event,
    gpus: List[str],
    shard_count: int,
) -> int:
    said = nccl_lines(
        dict(os.environ), socket.gethostname(), os.getpid(), engine, gpus, _topology()
    )
    for line in said + transfer_lines(engine, dict(os.environ)):
        say(line)
    lines = loading_lines(engine, plan, shard_count)
    failure = os.environ.get("LLMGW_SIM_FAIL")
    for index, (text, end) in enumerate(lines):
        if stop.wait(load_s / max(1, len(lines))):
            say("INFO Shutting down while loading")
            return 0
        say(text, end)
        if failure and index >= len(lines) // 2:
            say(
                "ERROR {} EngineCore failed to start: {}".format(time.strftime("%H:%M:%S"), failure)
            )
            return 1
    _write_usage(gpus, plan["used_mib"])
    for line in ready_lines(engine, plan, load_s, bound):
        say(line)
    state.ready.set()
    stop.wait()
    say("INFO:     Shutting down")
    return 0


def ray_refusal(engine: dict, environ: dict) -> Optional[str]:
    """Why Ray, so started, would stop at once (None: it starts), as Ray 2.52 on does.

    With `RAY_AUTH_MODE=token` Ray takes its token from `RAY_AUTH_TOKEN` (taken
    out of `environ` here, as nothing of the sim's own needs it) and stops
    without one; its `--temp-dir` is a folder it makes. A placeholder the
    agent did not fill is refused, so the demo fails where a real node would.
    """
    token = environ.pop("RAY_AUTH_TOKEN", "")
    if environ.get("RAY_AUTH_MODE") == "token" and not token:
        return "token authentication is enabled but no authentication token was found"
    temp_dir = engine.get("temp_dir")
    if temp_dir is not None:
        if "@" in temp_dir or not os.path.isabs(temp_dir):
            return "--temp-dir {!r} is not an absolute folder".format(temp_dir)
        try:
            os.makedirs(temp_dir, exist_ok=True)
        except OSError as exc:
            return "cannot create --temp-dir {}: {}".format(temp_dir, exc.strerror)
    return None


def _run_listener(kind: str, engine: dict, host: str, stop: threading.Event) -> int:
    if kind == "ray":
        refused = ray_refusal(engine, os.environ)
        if refused is not None:
            say("ERROR: {}".format(refused))
            return 1
    listens = kind == "rpc-server" or engine["head"]
    listener = None
    if listens:
        try:
            listener = _listen_forever(host, engine["port"], stop)
        except OSError as exc:
            say("ERROR: could not bind {}:{}: {}".format(host, engine["port"], exc.strerror))
            return 1
    if kind == "ray":
        say("Local node IP: 127.0.0.1")
        say("Ray runtime started.")
        if engine["head"]:
            say("To add another node to this Ray cluster, run")
            say("  ray start --address='127.0.0.1:{}'".format(engine["port"]))
    else:
        say("Starting RPC server v3.0.0")
        say("  endpoint       : {}:{}".format(host, engine["port"]))
    stop.wait()
    if listener is not None:
        listener.close()
    return 0


def main(argv) -> int:
    """`llmgw sim-engine [--as KIND] -- REAL ARGV…`."""
    args = list(argv)
    real_argv: List[str] = []
    if "--" in args:
        split = args.index("--")
        args, real_argv = args[:split], args[split + 1 :]
    parser = argparse.ArgumentParser(prog="llmgw sim-engine")
    parser.add_argument("--as", dest="kind", choices=KINDS, default=None)
    options = parser.parse_args(args)
    kind = options.kind or engine_kind(real_argv)
    if kind is None or not real_argv:
        sys.stderr.write(
            "llmgw sim-engine: give the real command after `--` (vllm serve …, llama-server …)\n"
        )
        return 2
    return run_engine(kind, real_argv)
