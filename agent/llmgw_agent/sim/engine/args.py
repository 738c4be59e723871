"""Which engine a command line starts, and what the sim engine reads from it (pure).

In replay mode the agent runs the sim engine in place of a real one, with
the real argv. The rule that recognises an engine command lives here:

* `vllm serve …`, `sglang serve …`, `llama-server …`, `rpc-server …`, `ray start …`
  (by the basename of argv[0]);
* `python… -m vllm.entrypoints.openai.api_server`, `-m sglang.launch_server`,
  `-m llama_cpp.server` (any python interpreter).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import List, Optional

from llmgw_agent.engine_keys import KEY_VARIABLES

KINDS = ("vllm", "sglang", "llama.cpp", "rpc-server", "ray")

_BY_PROGRAM = {
    "vllm": "vllm",
    "sglang": "sglang",
    "llama-server": "llama.cpp",
    "rpc-server": "rpc-server",
    "ray": "ray",
}
_BY_MODULE = {
    "vllm.entrypoints.openai.api_server": "vllm",
    "vllm.entrypoints.cli.main": "vllm",
    "sglang.launch_server": "sglang",
    "llama_cpp.server": "llama.cpp",
}
_DEFAULT_PORTS = {
    "vllm": 8000,
    "sglang": 30000,
    "llama.cpp": 8080,
    "rpc-server": 50052,
    "ray": 6379,
}
_DEFAULT_MEMORY_FRACTION = {"vllm": 0.9, "sglang": 0.88}


def _module_of(argv: List[str]) -> Optional[str]:
    """The module a Python argv runs: `python -m M …`, or the key shim's `python -c SHIM M …`."""
    if not os.path.basename(argv[0]).startswith("python") or len(argv) < 3:
        return None
    if argv[1] == "-m":
        return argv[2]
    if argv[1] == "-c" and len(argv) >= 4 and "runpy.run_module" in argv[2]:
        return argv[3]
    return None


def engine_kind(argv: List[str]) -> Optional[str]:
    """The engine an argv starts (`vllm`, `sglang`, `llama.cpp`, `rpc-server`, `ray`), or None."""
    if not argv:
        return None
    program = os.path.basename(argv[0])
    if program in _BY_PROGRAM:
        return _BY_PROGRAM[program]
    module = _module_of(argv)
    return _BY_MODULE.get(module) if module else None


def _engine_args(argv: List[str]) -> List[str]:
    """The flags after the program (and `-m module` or the shim, and a `serve`/`start` verb)."""
    if _module_of(argv) is not None:
        return list(argv[3:] if argv[1] == "-m" else argv[4:])
    return list(argv[1:])


def client_key(kind: str, argv: List[str], environ: dict) -> Optional[str]:
    """The key clients must present: `--api-key`, else the engine's variable (taken out of
    `environ`, as the shim does, so no child inherits it); None: every request is taken."""
    options, _unknown = _key_parser().parse_known_args(_engine_args(argv))
    found = options.api_key
    for name in KEY_VARIABLES.get(kind, ()):
        value = environ.pop(name, None)
        found = found or value
    return found or None


def _key_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--api-key", "--api_key", dest="api_key", default=None)
    return parser


def _parser(kind: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=kind, add_help=False, allow_abbrev=False)
    add = parser.add_argument
    add("--port", "-p", type=int, default=_DEFAULT_PORTS[kind])
    add("--host", "-H", default=None)
    add("--served-model-name", "--alias", "-a", "--model_alias", nargs="+", default=None)
    # HTTPS files: vLLM's and SGLang's --ssl-certfile, llama-server's --ssl-cert-file,
    # llama-cpp-python's --ssl_certfile (and the keys alike).
    add("--ssl-certfile", "--ssl-cert-file", "--ssl_certfile", dest="ssl_certfile", default=None)
    add("--ssl-keyfile", "--ssl-key-file", "--ssl_keyfile", dest="ssl_keyfile", default=None)
    if kind == "vllm":
        add("--model", default=None)
        add("--tensor-parallel-size", "-tp", type=int, default=1)
        add("--pipeline-parallel-size", "-pp", type=int, default=1)
        add("--data-parallel-size", "-dp", type=int, default=1)
        add("--max-model-len", default=None)
        add("--gpu-memory-utilization", type=float, default=_DEFAULT_MEMORY_FRACTION[kind])
        add("--nnodes", "-n", type=int, default=1)
        add("--node-rank", "-r", type=int, default=0)
        add("--headless", action="store_true")
        add("--master-addr", default=None)
        add("--max-num-seqs", type=int, default=None)
        add("--enable-auto-tool-choice", action="store_true")
        add("--tool-call-parser", default=None)
        add("--kv-cache-dtype", default="auto")
        add("--enable-lora", action="store_true")
        add("--lora-modules", nargs="+", default=[])
        add("--max-loras", type=int, default=1)
        add("--max-lora-rank", type=int, default=16)
        add("--kv-transfer-config", default=None)
    elif kind == "sglang":
        add("--model-path", "--model", default=None)
        add("--tp-size", "--tensor-parallel-size", "--tp", type=int, default=1)
        add("--pp-size", "--pipeline-parallel-size", type=int, default=1)
        add("--nnodes", type=int, default=1)
        add("--node-rank", type=int, default=0)
        add("--dist-init-addr", "--nccl-init-addr", default=None)
        add("--context-length", default=None)
        add("--mem-fraction-static", type=float, default=_DEFAULT_MEMORY_FRACTION[kind])
        add("--max-running-requests", type=int, default=None)
        add("--tool-call-parser", default=None)
        add("--kv-cache-dtype", default="auto")
        add("--enable-lora", action="store_true")
        add("--lora-paths", nargs="*", default=[])
        add("--max-loras-per-batch", dest="max_loras", type=int, default=8)
        add("--max-lora-rank", type=int, default=None)
        add("--disaggregation-mode", default="null")
        add("--disaggregation-transfer-backend", default="mooncake")
        add("--disaggregation-ib-device", default=None)
    elif kind == "llama.cpp":
        add("--model", "-m", default=None)
        add("--n-gpu-layers", "-ngl", "--gpu-layers", "--n_gpu_layers", default="auto")
        add("--ctx-size", "-c", "--n_ctx", type=int, default=0)
        add("--rpc", default=None)
        add("--parallel", "-np", type=int, default=None)
        add("--jinja", action="store_true")
        add("--cache-type-k", "-ctk", default="f16")
        add("--cache-type-v", "-ctv", default="f16")
        add("--flash-attn", "-fa", default="auto")
        add("--lora", "--lora_path", action="append", default=[])
        add("--lora-scaled", action="append", default=[])
        add("--lora-init-without-apply", action="store_true")
    elif kind == "ray":
        add("--head", action="store_true")
        add("--address", default=None)
        add("--block", action="store_true")
        add("--temp-dir", default=None)
    return parser


def _context_tokens(text: Optional[str]) -> Optional[int]:
    """`32768`, `32k` (×1000), `32K` (×1024), `auto`/`-1` (None: from the model)."""
    if text is None or text in ("auto", "-1"):
        return None
    multiplier = {"k": 1000, "K": 1024, "m": 1000_000, "M": 1024 * 1024}.get(text[-1:], 1)
    number = text[:-1] if multiplier != 1 else text
    try:
        return int(float(number) * multiplier)
    except ValueError:
        return None


def parse_engine_argv(kind: str, argv: List[str]) -> dict:
    """What the sim engine needs from a real command line; unknown flags are ignored.

    Returns:
        `{kind, model, served_name, host, port, tp, pp, nnodes, node_rank,
        serves_http, context_tokens, memory_fraction, gpu_layers, head, max_seqs,
        ssl_certfile, ssl_keyfile}` (the HTTPS files, None for plain HTTP).
    """
    rest = _engine_args(argv)
    positional_model = None
    if rest[:1] in (["serve"], ["start"]):
        rest = rest[1:]
        if rest and not rest[0].startswith("-"):
            positional_model, rest = rest[0], rest[1:]
    options, _unknown = _parser(kind).parse_known_args(rest)
    model = (
        positional_model or getattr(options, "model", None) or getattr(options, "model_path", None)
    )
    names = options.served_model_name or []
    if kind == "llama.cpp" and names and "," in names[0]:
        names = names[0].split(",")
    served_name = names[0] if names else (model or kind)
    tp = getattr(options, "tensor_parallel_size", None) or getattr(options, "tp_size", 1)
    pp = getattr(options, "pipeline_parallel_size", None) or getattr(options, "pp_size", 1)
    node_rank = getattr(options, "node_rank", 0)
    serves_http = kind in ("vllm", "sglang", "llama.cpp")
    if kind == "vllm" and options.headless:
        serves_http = False
    if kind == "sglang" and node_rank >= 1:
        serves_http = False  # SGLang's non-zero ranks run schedulers only: no HTTP
    context_text = getattr(options, "max_model_len", None) or getattr(
        options, "context_length", None
    )
    return {
        "kind": kind,
        "model": model,
        "served_name": served_name,
        "served_names": list(names) or [served_name],
        "host": options.host,
        "port": options.port,
        "tp": tp,
        "pp": pp,
        "nnodes": getattr(options, "nnodes", 1),
        "node_rank": node_rank,
        "serves_http": serves_http,
        "context_tokens": _context_tokens(context_text)
        or (getattr(options, "ctx_size", 0) or None),
        "memory_fraction": getattr(options, "gpu_memory_utilization", None)
        or getattr(options, "mem_fraction_static", None),
        "gpu_layers": getattr(options, "n_gpu_layers", None),
        "head": getattr(options, "head", False),
        "max_seqs": _max_seqs(kind, options),
        "tool_calling": _tool_calling(kind, options),
        "kv_bytes_ratio": _kv_bytes_ratio(kind, options),
        "flash_attn": getattr(options, "flash_attn", "auto") != "off",
        "ssl_certfile": options.ssl_certfile,
        "ssl_keyfile": options.ssl_keyfile,
        "temp_dir": getattr(options, "temp_dir", None),
        "adapters": _adapters(kind, options),
        "max_loras": getattr(options, "max_loras", None),
        "max_lora_rank": getattr(options, "max_lora_rank", None),
        "pd": _pd_role(kind, options),
    }


_VLLM_CONNECTORS = {"NixlConnector": "nixl", "MooncakeConnector": "mooncake",
                    "LMCacheConnectorV1": "lmcache"}  # fmt: skip
_VLLM_ROLES = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "either"}


def _pd_role(kind: str, options: argparse.Namespace) -> Optional[dict]:
    """A prefill or decode worker's part: `{role, connector, engine_name, ib_devices}`, None
    for an engine doing both (vLLM's `--kv-transfer-config`, SGLang's `--disaggregation-*`)."""
    if kind == "vllm" and options.kv_transfer_config:
        try:
            given = json.loads(options.kv_transfer_config)
        except ValueError:
            return None
        if not isinstance(given, dict):
            return None
        name = str(given.get("kv_connector") or "")
        return {
            "role": _VLLM_ROLES.get(str(given.get("kv_role")), "either"),
            "connector": _VLLM_CONNECTORS.get(name, name.lower()),
            "engine_name": name,
            "ib_devices": [],
        }
    if kind == "sglang" and options.disaggregation_mode in ("prefill", "decode"):
        backend = options.disaggregation_transfer_backend
        devices = options.disaggregation_ib_device
        return {
            "role": options.disaggregation_mode,
            "connector": backend,
            "engine_name": backend,
            "ib_devices": [d for d in (devices or "").split(",") if d],
        }
    return None


def _adapters(kind: str, options: argparse.Namespace) -> List[dict]:
    """The LoRA adapters a command loads: `[{name, path}]` (llama.cpp numbers them: name = id).

    vLLM's `--lora-modules` takes `name=path` or JSON `{"name", "path", "base_model_name"}`,
    SGLang's `--lora-paths` `name=path` (or a bare path, named by it); both only with
    `--enable-lora`, as the engines refuse them otherwise.
    """
    if kind == "llama.cpp":
        # llama-server: `--lora A,B` (1.0 each) then `--lora-scaled A:S,B:S`, numbered in order.
        given = [(p, 1.0) for text in options.lora for p in text.split(",") if p]
        for text in options.lora_scaled:
            for item in text.split(","):
                path, _, scale = item.rpartition(":")
                try:
                    given.append((path, float(scale)))
                except ValueError:
                    continue
        return [{"name": str(i), "path": p, "scale": s} for i, (p, s) in enumerate(given)]
    if kind not in ("vllm", "sglang") or not options.enable_lora:
        return []
    found = []
    for item in options.lora_modules if kind == "vllm" else options.lora_paths:
        if item.startswith("{"):
            try:
                given = json.loads(item)
            except ValueError:
                continue
            if isinstance(given, dict) and isinstance(given.get("name"), str):
                found.append({"name": given["name"], "path": str(given.get("path") or "")})
            continue
        name, equals, path = item.partition("=")
        found.append({"name": name, "path": path} if equals else {"name": item, "path": item})
    return found


_CACHE_RATIO = {"f32": 2.0, "f16": 1.0, "bf16": 1.0, "q8_0": 34 / 64, "q5_1": 24 / 64,
                "q5_0": 22 / 64, "q4_1": 20 / 64, "q4_0": 18 / 64, "iq4_nl": 18 / 64}  # fmt: skip


def _kv_bytes_ratio(kind: str, options: argparse.Namespace) -> float:
    """The KV cache's bytes a token against 16-bit (an fp8 cache: 0.5; llama.cpp's q8_0: 34/64)."""
    if kind == "llama.cpp":
        halves = (options.cache_type_k, options.cache_type_v)
        return sum(_CACHE_RATIO.get(str(t).lower(), 1.0) for t in halves) / 2
    dtype = str(getattr(options, "kv_cache_dtype", "auto") or "auto")
    return 0.5 if dtype.startswith("fp8") else 1.0


def _tool_calling(kind: str, options: argparse.Namespace) -> bool:
    """Whether the engine, so started, answers `tool_choice: auto` with tool calls (vLLM: both
    flags; SGLang: a parser; llama-server: `--jinja`)."""
    if kind == "vllm":
        return bool(options.enable_auto_tool_choice and options.tool_call_parser)
    if kind == "sglang":
        return bool(options.tool_call_parser)
    return bool(getattr(options, "jinja", False))


MAX_SEQS_DEFAULT = {"vllm": 256, "sglang": 256, "llama.cpp": 1}
"""How many sequences each engine answers at once when its command does not say (vLLM's
`--max-num-seqs` default; SGLang sizes its own, about as many; llama-server's one slot)."""


def _max_seqs(kind: str, options: argparse.Namespace) -> int:
    given = (
        getattr(options, "max_num_seqs", None)
        or getattr(options, "max_running_requests", None)
        or getattr(options, "parallel", None)
    )
    return max(1, given) if isinstance(given, int) else MAX_SEQS_DEFAULT.get(kind, 1)
