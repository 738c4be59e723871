"""llama.cpp's commands: `llama-server`, or llama-cpp-python's `python -m llama_cpp.server` (pure).

One node only: a GGUF file, on the node's cards split by layer, or in its
RAM on a CPU node (no layer offloaded, and no card visible). Host, port,
context and layers are always given: llama-server's defaults move (its port
is leaving 8080, and `--fit` rewrites whatever is left unset to fit memory).

`llama-server` divides `--ctx-size` among its `--parallel` slots, so N
sequences of C tokens ask for N × C.
"""

from __future__ import annotations

from llmgw_core.engines.environment import shard_env
from llmgw_core.engines.flags import argv_of, engine_options_of
from llmgw_core.engines.identity import tls_flags
from llmgw_core.engines.programs import DEFAULT_PROGRAMS, is_llama_cpp_python
from llmgw_core.engines.spec import LLAMA_CPP, LaunchNode, LaunchRequest, ShardCommand
from llmgw_core.errors import BadInput

ALL_LAYERS = "999"
"""More layers than any model has: every layer on the cards (older builds know no `all`)."""


def _program(node: LaunchNode) -> tuple[str, ...]:
    return node.program or DEFAULT_PROGRAMS[LLAMA_CPP]


def _llama_server(request: LaunchRequest, node: LaunchNode) -> list[str]:
    argv = [*_program(node), "--model", request.source, "--alias", request.served_name]
    argv += ["--host", node.bind, "--port", str(node.http_port)]
    if request.tls is not None:
        # HTTPS with the replica's own certificate (engines.identity). A build without
        # OpenSSL refuses these flags at start ("built without SSL support"), loudly.
        argv += tls_flags("--ssl-cert-file", "--ssl-key-file")
    argv += ["--ctx-size", str(request.context * request.concurrency)]
    if request.concurrency > 1:
        argv += ["--parallel", str(request.concurrency)]
    argv += ["--n-gpu-layers", ALL_LAYERS if node.gpus else "0"]
    if len(node.gpus) > 1:
        argv += ["--split-mode", "layer"]
    # /metrics (off by default): its requests in flight, which a roll drains.
    argv += ["--metrics"]
    # Flash attention is the plan's decision, never the build's default (`auto` differs by build
    # and backend, and without it the compute buffer holds every head's scores).
    options = engine_options_of(request.engine_args)
    argv += ["--flash-attn", "on" if options.flash_attn else "off"]
    if "ubatch_size" in request.engine_args:
        argv += ["--ubatch-size", str(options.n_ubatch)]
    if request.lora is not None:
        argv += ["--lora-scaled", lora_scaled(request.lora.adapters)]
    return argv + argv_of(LLAMA_CPP, request.engine_args)


def lora_scaled(adapters: tuple[tuple[str, str], ...]) -> str:
    """`--lora-scaled`'s value: every adapter loaded at start at scale 0, so a request that
    names none is the bare model's; the gateway turns an adapter's name into its id in the
    request's `lora` (a list names some, and llama-server leaves the rest at 0).

    `--lora-init-without-apply` would be the flag for this, and b11312 still applies every
    adapter to a request without `lora` with it; `--lora` given twice keeps the last only.

    Raises:
        BadInput: a path holding `,` or `:`, which that list cannot carry.
    """
    for name, path in adapters:
        if "," in path or ":" in path:
            raise BadInput(
                f"adapter {name!r}'s path {path!r} holds a ',' or a ':', which llama-server's "
                "--lora-scaled list cannot carry",
                "move or link the file to a path without them",
            )
    return ",".join(f"{path}:0" for _name, path in adapters)


def _llama_cpp_python(request: LaunchRequest, node: LaunchNode) -> list[str]:
    # llama-cpp-python's server takes its settings' field names as flags,
    # and answers one request at a time: its context is one sequence's.
    if request.engine_args:
        raise BadInput(
            "engine_args are llama-server's flags; llama-cpp-python's server names its own "
            "otherwise and is given none",
            "install llama-server on the node, or drop engine_args",
        )
    argv = [*_program(node), "--model", request.source, "--model_alias", request.served_name]
    argv += ["--host", node.bind, "--port", str(node.http_port)]
    if request.tls is not None:  # its settings' uvicorn TLS files (engines.identity)
        argv += tls_flags("--ssl_certfile", "--ssl_keyfile")
    argv += ["--n_ctx", str(request.context)]
    argv += ["--n_gpu_layers", "-1" if node.gpus else "0"]
    # A new request (the health probe included) would otherwise cut a streamed answer short.
    argv += ["--interrupt_requests", "False"]
    # The plan sizes flash attention on; llama-cpp-python's own default is off.
    argv += ["--flash_attn", "True"]
    if request.lora is not None:
        if len(request.lora.adapters) != 1:
            raise BadInput(
                "llama-cpp-python's server applies one LoRA adapter to every request, "
                f"and {len(request.lora.adapters)} are given",
                "serve one adapter a replica there, or install llama-server on the node",
            )
        argv += ["--lora_path", request.lora.adapters[0][1]]
    return argv


def commands(request: LaunchRequest, node: LaunchNode) -> tuple[ShardCommand, ...]:
    """The one process of the node's shard."""
    if is_llama_cpp_python(_program(node)):
        return (
            ShardCommand(
                "llama_cpp.server",
                tuple(_llama_cpp_python(request, node)),
                shard_env(request, node),
            ),
        )
    return (
        ShardCommand("llama-server", tuple(_llama_server(request, node)), shard_env(request, node)),
    )


def health_path(program: tuple[str, ...]) -> str:
    """`/health` for llama-server; `/openapi.json` for llama-cpp-python's server.

    llama-cpp-python has no health route. It loads the model before it
    listens, so any answer means loaded; `/openapi.json` answers without the
    model lock, where `/v1/models` waits behind a running completion (and
    timed out the probe during long answers).
    """
    return "/openapi.json" if is_llama_cpp_python(program) else "/health"
