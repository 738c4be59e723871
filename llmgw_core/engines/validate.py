"""What is checked before anything starts (pure; SPEC §4 "Validation").

A launch that cannot work is refused here, with a sentence, before a single
byte is fetched or a card is claimed: an engine that fails an hour into a
download, or a tensor group that starts and then hangs, costs far more than
a refusal now.
"""

from __future__ import annotations

import re

from llmgw_core.engines import ray_cluster
from llmgw_core.engines.allowlist import checked_env, value_refusal
from llmgw_core.engines.programs import at_least
from llmgw_core.engines.spec import (
    ENGINES,
    LLAMA_CPP,
    MULTIPROCESSING,
    RAY,
    SGLANG,
    SIM,
    VLLM,
    LaunchGpu,
    LaunchNode,
    LaunchRequest,
)
from llmgw_core.engines.vllm import MP_MULTI_NODE_SINCE, executor
from llmgw_core.errors import BadInput
from llmgw_core.model.quantization import online_fp8

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

SGLANG_TLS_SINCE = (0, 5, 10)
"""SGLang's server takes `--ssl-certfile`/`--ssl-keyfile` from 0.5.10 (0.5.8 has none; read
from the releases' `server_args`): an older one cannot serve the replica's certificate."""


def validate_launch(request: LaunchRequest) -> None:
    """Refuse a launch that cannot work; return quietly when it can.

    Raises:
        BadInput: the first thing wrong, as one sentence with its fix.
    """
    _check_basics(request)
    _check_ranks(request)
    _check_layout(request)
    _check_uniform_cards(request)
    _check_mig(request)
    _check_compute_capability(request)
    _check_fabric(request)
    _check_versions(request)
    _check_ray(request)
    _check_ports(request)
    checked_env(request.extra_env)
    for key, value in request.secret_env.items():
        if value_refusal(value):
            raise BadInput(f"the secret {key} from the token store holds a control character")


def _check_text(what: str, value: str) -> None:
    if not value or _CONTROL.search(value):
        raise BadInput(f"the {what} {value!r} is empty or holds a control character")
    if value.startswith("-"):
        raise BadInput(
            f"the {what} {value!r} starts with '-' and would be read as a flag",
            f"give a {what} that starts with a letter, a digit or '/'",
        )


def _check_basics(request: LaunchRequest) -> None:
    if request.engine not in ENGINES:
        raise BadInput(f"unknown engine {request.engine!r}", f"use one of {', '.join(ENGINES)}")
    _check_text("model", request.source)
    _check_text("served name", request.served_name)
    if not request.nodes:
        raise BadInput("a launch needs at least one node")
    if request.context < 1:
        raise BadInput(f"a context of {request.context} tokens serves nothing")
    if request.concurrency < 1:
        raise BadInput(f"a concurrency of {request.concurrency} serves nothing")
    if request.tensor_parallel < 1 or request.pipeline_parallel < 1:
        raise BadInput(
            f"tensor parallel {request.tensor_parallel} and pipeline parallel "
            f"{request.pipeline_parallel} must both be 1 or more"
        )
    share = request.gpu_memory_utilization
    if share is not None and not 0.0 < share <= 1.0:
        raise BadInput(f"a GPU memory share of {share} is not between 0 and 1")
    planned = request.planned_context
    if planned is not None and request.context > planned:
        raise BadInput(
            f"a context of {request.context} tokens is more than the {planned} the plan "
            "sized the cards for",
            f"plan again with a context of {request.context}",
        )


def _check_ranks(request: LaunchRequest) -> None:
    ranks = sorted(node.rank for node in request.nodes)
    if ranks != list(range(len(request.nodes))):
        raise BadInput(
            f"the nodes' ranks are {ranks}; a replica of {len(request.nodes)} nodes "
            f"numbers them 0 to {len(request.nodes) - 1}, each once"
        )
    names = [node.name for node in request.nodes]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise BadInput(f"the node {twice[0]} is given two ranks of one replica")


def _check_layout(request: LaunchRequest) -> None:
    width, stages = request.tensor_parallel, request.pipeline_parallel
    if request.engine == LLAMA_CPP:
        if request.multi_node:
            raise BadInput(
                f"llama.cpp runs on one node, and this launch spans {len(request.nodes)}",
                "serve the GGUF on one node's cards or in its RAM",
            )
        cards = len(request.head.gpus)
        if cards and cards != width * stages:
            raise BadInput(
                f"{request.head.name} gives llama.cpp {cards} cards for a split over "
                f"{width * stages}"
            )
        return
    if request.cpu_kv_cache_gib is not None and request.engine in (VLLM, "sim"):
        # vLLM's CPU backend: no cards, a rank per NUMA node of one node.
        if request.multi_node or stages != 1 or any(node.gpus for node in request.nodes):
            raise BadInput(
                "vLLM's CPU backend runs on one CPU node, a tensor-parallel rank per NUMA node",
                "serve it on one CPU node, without cards or pipeline stages",
            )
        return
    for node in request.nodes:
        if not node.gpus:
            raise BadInput(
                f"{request.engine} needs cards and {node.name} gives it none",
                "serve a GGUF file with llama.cpp, or unquantised weights with vLLM, on a CPU node",
            )
    per_node = {len(node.gpus) for node in request.nodes}
    if len(per_node) > 1:
        counts = ", ".join(f"{node.name} {len(node.gpus)}" for node in request.ranked_nodes)
        raise BadInput(f"every node of a replica runs the same number of cards ({counts})")
    cards = len(request.nodes) * per_node.pop()
    if cards != width * stages:
        raise BadInput(
            f"{len(request.nodes)} nodes × {len(request.head.gpus)} cards is {cards} cards, "
            f"and tensor parallel {width} × pipeline parallel {stages} needs {width * stages}",
            "give as many cards as TP × PP",
        )


def _all_gpus(request: LaunchRequest) -> list[tuple[LaunchNode, LaunchGpu]]:
    return [(node, gpu) for node in request.ranked_nodes for gpu in node.gpus]


def _check_uniform_cards(request: LaunchRequest) -> None:
    # The slowest card paces every collective and the smallest decides what
    # fits: a tensor group of mixed cards is slow at best, out of memory at worst.
    placed = _all_gpus(request)
    if not placed:
        return
    first_node, first = placed[0]
    for node, gpu in placed[1:]:
        if gpu.gpu_class != first.gpu_class:
            raise BadInput(
                f"the cards are not all one kind: {first_node.name} card {first.card_index} is "
                f"{first.gpu_class} and {node.name} card {gpu.card_index} is {gpu.gpu_class}",
                "place the replica on cards of one class",
            )


def _check_mig(request: LaunchRequest) -> None:
    placed = _all_gpus(request)
    migs = [(node, gpu) for node, gpu in placed if gpu.is_mig]
    if migs and len(placed) > 1:
        node, gpu = migs[0]
        raise BadInput(
            f"{node.name} {gpu.id} is a MIG instance, and a MIG instance runs alone: CUDA "
            f"shows a process one instance, and this launch gives {len(placed)} devices",
            "serve the model on one MIG instance, or on whole cards",
        )
    if migs and not migs[0][1].uuid:
        node, gpu = migs[0]
        raise BadInput(
            f"{node.name} did not report the UUID of MIG instance {gpu.id}, and CUDA "
            "names an instance only by it",
            "refresh the node (nvidia-smi -L lists the MIG UUIDs)",
        )


def _capability(gpu: LaunchGpu) -> float | None:
    try:
        return float(gpu.compute_capability) if gpu.compute_capability else None
    except ValueError:
        return None


def _capability_floor(request: LaunchRequest) -> float | None:
    """The oldest card the weights load on: the planner's figure, else online FP8's."""
    if request.min_compute_capability is not None:
        return request.min_compute_capability
    online = online_fp8()
    if request.quantization_flag == online.vllm_flag:
        return online.min_compute_capability
    return None


def _check_compute_capability(request: LaunchRequest) -> None:
    floor = _capability_floor(request)
    if floor is None:
        return
    what = request.quantization or request.quantization_flag or "these"
    for node, gpu in _all_gpus(request):
        capability = _capability(gpu)
        if capability is not None and capability < floor:
            raise BadInput(
                f"{what} weights need compute capability {floor:.1f} and {node.name} card "
                f"{gpu.card_index} ({gpu.name or gpu.gpu_class}) has {capability:.1f}",
                "serve another precision of the model, or place it on newer cards",
            )


def _check_fabric(request: LaunchRequest) -> None:
    for node in request.nodes:
        layers = {adapter.is_roce for adapter in node.adapters}
        if len(layers) > 1:
            raise BadInput(
                f"{node.name} mixes InfiniBand and RoCE adapters on fabric {node.fabric}",
                "list one kind of adapter per fabric in the inventory",
            )
        gids = {a.gid_index for a in node.adapters if a.is_roce and a.gid_index is not None}
        if len(gids) > 1:
            raise BadInput(
                f"{node.name}'s RoCE adapters on {node.fabric} use different GID indexes "
                f"{sorted(gids)}, and NCCL takes one",
                "give the fabric's adapters one RoCE v2 GID index",
            )
    if not request.multi_node:
        return
    domains = {node.nvlink_domain for node in request.nodes}
    if len(domains) == 1 and None not in domains:
        return
    if domains != {None}:
        # MNNVL is all or nothing: a rank told to use NVLink to a peer outside
        # its domain fails its first collective.
        raise BadInput(
            "a replica is inside one NVLink domain or in none, and these nodes are not "
            "all in the same one",
            "place it inside one domain, or on one fabric with no domain given",
        )
    fabrics = {node.fabric for node in request.nodes}
    if None in fabrics or any(not node.adapters for node in request.nodes):
        alone = next(n for n in request.ranked_nodes if n.fabric is None or not n.adapters)
        raise BadInput(
            f"a replica across nodes needs one fabric or one NVLink domain, and "
            f"{alone.name} is given neither",
            "place it on nodes of one InfiniBand or RoCE fabric",
        )
    if len(fabrics) > 1:
        raise BadInput(
            f"a replica spans one fabric, never two, and these nodes are on {sorted(fabrics)}",
            "place it on nodes of one fabric",
        )


def _check_versions(request: LaunchRequest) -> None:
    if request.engine == SIM:
        real = [node.name for node in request.ranked_nodes if not node.simulated]
        if real:
            raise BadInput(
                f"the sim engine runs only on simulated nodes, and {real[0]} is a real one",
                "serve with vllm, sglang or llama.cpp",
            )
    reported = {node.engine_version for node in request.nodes if node.engine_version}
    if request.multi_node and len(reported) > 1:
        raise BadInput(
            f"the nodes run different {request.engine} versions ({', '.join(sorted(reported))}), "
            "and the ranks of one replica must agree",
            "install one version on every node",
        )
    old_sglang = at_least(request.head.engine_version, SGLANG_TLS_SINCE) is False
    if request.engine == SGLANG and request.tls is not None and old_sglang:
        raise BadInput(
            f"SGLang {request.head.engine_version} on {request.head.name} takes no certificate"
            " (--ssl-certfile came in 0.5.10), and llmgw serves every engine over HTTPS with"
            " its own",
            "install SGLang 0.5.10 or later there",
        )
    if request.engine not in (VLLM, SIM) or request.executor is None:
        return
    if request.executor not in (RAY, MULTIPROCESSING):
        raise BadInput(
            f"unknown vLLM executor {request.executor!r}", "use ray or mp, or leave it out"
        )
    version = request.head.engine_version
    if request.executor == MULTIPROCESSING and at_least(version, MP_MULTI_NODE_SINCE) is False:
        raise BadInput(
            f"vLLM {version} joins nodes only through Ray; its own multi-node mode "
            "(--nnodes) came in 0.12.0",
            "use the ray executor, or install vLLM 0.12 or later",
        )


def _check_ray(request: LaunchRequest) -> None:
    # A Ray without tokens takes jobs from anyone who reaches its port: never start one.
    if request.engine not in (VLLM, SIM) or executor(request) != RAY:
        return
    mp_available = at_least(request.head.engine_version, MP_MULTI_NODE_SINCE) is not False
    refused = ray_cluster.refusal(request, mp_available)
    if refused is not None:
        raise refused


def _check_ports(request: LaunchRequest) -> None:
    for node in request.nodes:
        if not 1 <= node.http_port <= 65535:
            raise BadInput(f"{node.name}'s port {node.http_port} is not a TCP port")
    port = request.rendezvous_port
    if port is None:
        return
    if not 1 <= port <= 65535:
        raise BadInput(f"the rendezvous port {port} is not a TCP port")
    if request.multi_node and port == request.head.http_port:
        raise BadInput(
            f"port {port} on {request.head.name} cannot be both the HTTP port and the "
            "rendezvous port",
            "give them different ports",
        )
