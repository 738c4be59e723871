"""SGLang's commands: `python -m sglang.launch_server` on every node (pure).

Every node runs the same command but for `--node-rank`; rank 0 is the
`--dist-init-addr` the others join. Ranks from 1 on run schedulers only:
no tokenizer and no HTTP server, so only rank 0 has a health URL (probing
the others would fail a replica that is coming up well).

Flags are written in full: SGLang's parser accepts prefixes, and `--pp`
matches three flags.
"""

from __future__ import annotations

from llmgw_core.engines.disagg import launch_env, launch_flags
from llmgw_core.engines.environment import shard_env
from llmgw_core.engines.flags import argv_of
from llmgw_core.engines.identity import tls_flags
from llmgw_core.engines.keys import keyed_program
from llmgw_core.engines.programs import DEFAULT_PROGRAMS
from llmgw_core.engines.spec import SGLANG, LaunchNode, LaunchRequest, ShardCommand, host_port

DEFAULT_DIST_INIT_PORT = 20000


def commands(request: LaunchRequest, node: LaunchNode) -> tuple[ShardCommand, ...]:
    """The one process of `node`'s shard."""
    program = keyed_program(request, node.program or DEFAULT_PROGRAMS[SGLANG])
    argv = [*program, "--model-path", request.source]
    argv += ["--served-model-name", request.served_name]
    argv += ["--host", node.bind, "--port", str(node.http_port)]
    if request.tls is not None and node.rank == request.head.rank:
        # HTTPS with the replica's own certificate (engines.identity); the other ranks serve none.
        argv += tls_flags("--ssl-certfile", "--ssl-keyfile")
    argv += ["--tp-size", str(request.tensor_parallel)]
    if request.pipeline_parallel > 1:
        argv += ["--pp-size", str(request.pipeline_parallel)]
    if request.expert_parallel:
        # SGLang wants the experts' width times their data-parallel width to
        # equal the tensor width; with no MoE data parallelism that is TP.
        argv += ["--ep-size", str(request.tensor_parallel)]
    argv += ["--context-length", str(request.context)]
    if request.quantization_flag:
        argv += ["--quantization", request.quantization_flag]
    if request.dtype_flag:
        argv += ["--dtype", request.dtype_flag]
    if request.gpu_memory_utilization is not None:
        argv += ["--mem-fraction-static", f"{request.gpu_memory_utilization:.2f}"]
    if request.concurrency > 1:
        argv += ["--max-running-requests", str(request.concurrency)]
    if request.lora is not None:
        lora = request.lora
        argv += ["--enable-lora", "--max-loras-per-batch", str(lora.max_loras)]
        argv += ["--max-lora-rank", str(lora.max_lora_rank), "--lora-paths"]
        argv += [f"{name}={path}" for name, path in lora.adapters]
    argv += launch_flags(request, node)  # a prefill or decode worker's connector and rails
    argv += argv_of("sglang", request.engine_args)
    if request.multi_node:
        port = request.rendezvous_port or DEFAULT_DIST_INIT_PORT
        argv += ["--nnodes", str(len(request.nodes)), "--node-rank", str(node.rank)]
        argv += ["--dist-init-addr", host_port(request.head.address, port)]
    env = {**launch_env(request, node), **shard_env(request, node)}
    return (ShardCommand("sglang", tuple(argv), env),)
