"""The `estimate` step: what one engine will do with one layout, in its own start-up terms.

```yaml
- estimate:
    model: meta-llama/Llama-3.1-8B-Instruct   # or a directory, or catalog:org/name
    engine: vllm              # vllm | sglang | llama.cpp
    engine_version: "0.19.0"  # optional; default the newest rules known
    gpu: h100-80g             # or gpu_memory_gib: 79.19
    tensor_parallel: 2
    gpu_memory_utilization: 0.95
    max_model_len: 8192
```

The result is per card — `weights_gib`, `activation_gib`, `non_torch_gib`,
`cuda_graph_gib`, `kv_cache_gib`, `kv_cache_tokens`, `max_concurrency`,
`fits` — and, when the engine would refuse to start, `reason` worded as the
engine words it.

For llama.cpp it also takes `flash_attn` (true, as the launch passes it),
`n_ubatch` (512), `sequences` (its `--parallel`), `swa_full` (true for
llama-cpp-python), `n_outputs` (the logits reserved a micro-batch: all its
tokens unless told) and, with `cpu: true`, `cpu_repack` (`x86_64`, `amx` or
`aarch64`: the types that CPU copies into a repacked buffer), and adds
`buffers_mib`: each buffer as llama.cpp logs it — model, repack, KV,
compute, output, CUDA context — to the hundredth of a MiB.

A layout that does not fit is an answer, not a failure: the
step is ok and exits 0.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from llmgw_core.arguments import ModelRef
from llmgw_core.errors import BadInput
from llmgw_core.model.artifacts import Artifact
from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step


class EstimateArgs(StepArgs):
    """Arguments of `estimate`."""

    model: ModelRef
    engine: Literal["vllm", "sglang", "llama.cpp"] = "vllm"
    engine_version: str | None = None
    gpu_memory_gib: float | None = Field(default=None, gt=0, le=4096)
    gpu: str | None = None
    tensor_parallel: int = Field(default=1, ge=1, le=1024)
    pipeline_parallel: int = Field(default=1, ge=1, le=1024)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    max_model_len: int | None = Field(default=None, gt=0, le=16_777_216)
    dtype: Literal["auto", "bfloat16", "float16", "half", "float32", "float"] | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    max_num_seqs: int | None = Field(default=None, gt=0)
    artifact: str | None = None
    concurrency: int = Field(default=1, ge=1, le=65_536)
    enforce_eager: bool = False
    estimate_cuda_graphs: bool | None = None
    cpu: bool = False  # llama.cpp on a CPU node: gpu_memory_gib is the node's RAM
    # llama.cpp only: as the launch starts it, unless told.
    flash_attn: bool = True
    n_ubatch: int = Field(default=512, ge=1, le=2048)
    sequences: int | None = Field(default=None, ge=1, le=65_536)  # llama.cpp's --parallel
    swa_full: bool = False  # llama-cpp-python keeps whole-context cells on sliding layers
    # Logits reserved a micro-batch: all its tokens unless told (newer llama-server: one a slot).
    n_outputs: int | None = Field(default=None, ge=1, le=65_536)
    # What a CPU node's CPU copies into a repacked buffer (with `cpu: true`).
    cpu_repack: Literal["none", "x86_64", "amx", "aarch64"] = "none"

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, label: str | None) -> str | None:
        if label is not None:
            from llmgw_core.planner.gpu_classes import gpu_class

            try:
                gpu_class(label)
            except BadInput as exc:
                raise ValueError(exc.sentence()) from None
        return label

    @model_validator(mode="after")
    def _one_memory_source(self) -> EstimateArgs:
        if self.gpu_memory_gib is None and self.gpu is None:
            raise ValueError("give gpu_memory_gib or gpu (a class such as h100-80g)")
        if self.gpu_memory_gib is not None and self.gpu is not None:
            raise ValueError("give gpu_memory_gib or gpu, not both")
        return self


def card_memory_gib(args: EstimateArgs) -> float:
    """The card's memory: given, or the GPU class's memory visible to CUDA."""
    if args.gpu_memory_gib is not None:
        return args.gpu_memory_gib
    from llmgw_core.planner.gpu_classes import gpu_class

    return gpu_class(str(args.gpu)).memory_gib


def _pick_artifact(model: Any, args: EstimateArgs) -> Artifact:
    wanted_format = "gguf" if args.engine == "llama.cpp" else "safetensors"
    candidates = [a for a in model.artifacts if a.format == wanted_format]
    if args.artifact:
        chosen = [a for a in model.artifacts if a.name.lower() == args.artifact.lower()]
        if not chosen:
            names = ", ".join(a.name for a in model.artifacts) or "none"
            raise BadInput(
                f"{args.model} has no artifact {args.artifact!r}", f"its artifacts: {names}"
            )
        if chosen[0].format != wanted_format:
            raise BadInput(
                f"{args.engine} does not serve the {chosen[0].format} artifact {chosen[0].name}",
                "use llama.cpp for GGUF files and vllm or sglang for safetensors",
            )
        return chosen[0]
    if not candidates:
        if args.engine == "llama.cpp":
            raise BadInput(
                f"{args.model} has no GGUF file for llama.cpp", "use engine vllm or sglang"
            )
        raise BadInput(
            f"{args.model} has no safetensors weights for {args.engine}",
            "use engine llama.cpp for its GGUF files",
        )
    return candidates[0]


def estimate_result(model: Any, args: EstimateArgs) -> dict[str, Any]:
    """The step's result for a loaded model (no I/O)."""
    artifact = _pick_artifact(model, args)
    shape = artifact.shape or model.shape
    if shape is None:
        raise BadInput(f"the shape of {args.model} is unknown", "its GGUF header could not be read")
    memory = card_memory_gib(args)
    head: dict[str, Any] = {
        "model": args.model,
        "engine": args.engine,
        "artifact": artifact.name,
        "gpu_memory_gib": round(memory, 2),
        "tensor_parallel": args.tensor_parallel,
        "pipeline_parallel": args.pipeline_parallel,
    }
    if args.engine == "vllm":
        from llmgw_core.memory import DEFAULT_USABLE_FRACTION, vllm

        got = vllm.estimate(
            shape,
            artifact.size_bytes,
            gpu_memory_gib=memory,
            tensor_parallel=args.tensor_parallel,
            pipeline_parallel=args.pipeline_parallel,
            gpu_memory_utilization=args.gpu_memory_utilization or DEFAULT_USABLE_FRACTION,
            max_model_len=args.max_model_len,
            dtype=args.dtype,
            quantization=args.quantization,
            kv_cache_dtype=args.kv_cache_dtype,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_num_seqs=args.max_num_seqs,
            engine_version=args.engine_version,
            estimate_cuda_graphs=args.estimate_cuda_graphs,
            enforce_eager=args.enforce_eager,
        )
        return head | {"max_model_len": args.max_model_len or shape.max_context} | got.as_result()
    if args.engine == "sglang":
        return head | _sglang(shape, artifact, args, memory)
    return head | _llamacpp(shape, artifact, args, memory)


def _sglang(shape: Any, artifact: Artifact, args: EstimateArgs, memory: float) -> dict[str, Any]:
    from llmgw_core.memory import sglang

    if args.pipeline_parallel != 1:
        raise BadInput(
            "the sglang estimate covers tensor parallel only", "set pipeline_parallel: 1"
        )
    got = sglang.estimate(
        shape,
        artifact.size_bytes,
        gpu_memory_gib=memory,
        tensor_parallel=args.tensor_parallel,
        mem_fraction_static=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        kv_cache_dtype=args.kv_cache_dtype,
        dtype=args.dtype,
    )
    result: dict[str, Any] = {
        "max_model_len": args.max_model_len or shape.max_context,
        "mem_fraction_static": got.mem_fraction_static,
        "weights_gib": round(got.weights_gib, 2),
        "activation_gib": round(got.reserve_gib, 2),
        "non_torch_gib": round(got.init_gib, 2),
        "cuda_graph_gib": 0.0,
        "kv_cache_gib": round(got.kv_cache_gib, 2),
        "kv_cache_tokens": got.kv_cache_tokens,
        "max_concurrency": round(got.max_concurrency, 2),
        "fits": got.fits,
    }
    if got.swa_tokens:
        result["swa_kv_cache_tokens"] = got.swa_tokens
    if got.reason:
        result["reason"] = got.reason
    return result


def _llamacpp(shape: Any, artifact: Artifact, args: EstimateArgs, memory: float) -> dict[str, Any]:
    from llmgw_core.memory import llamacpp
    from llmgw_core.memory.need import EngineOptions

    devices = args.tensor_parallel * args.pipeline_parallel
    context = args.max_model_len or shape.max_context
    kv_type = args.kv_cache_dtype if args.kv_cache_dtype not in (None, "auto") else "f16"
    repack = llamacpp.REPACK_TYPES[args.cpu_repack if args.cpu else "none"]
    common: dict[str, Any] = dict(
        devices=devices,
        context=context,
        kv_type=kv_type,
        cpu_only=args.cpu,
        options=EngineOptions(
            flash_attn=args.flash_attn, n_ubatch=args.n_ubatch, n_outputs=args.n_outputs
        ),
        repack_types=repack,
        swa_full=args.swa_full,
    )
    sequences = args.sequences or args.concurrency
    got = llamacpp.estimate(artifact, shape, sequences=sequences, **common)
    usable = memory * (args.gpu_memory_utilization or 1.0)
    total = max(got.devices_gib) + (got.output_gib if args.cpu else 0.0)
    one = llamacpp.estimate(artifact, shape, **common)
    left = usable - (one.weights_gib + one.repack_gib + one.compute_gib + one.context_gib)
    mib = 1024.0
    result: dict[str, Any] = {
        "max_model_len": context,
        "weights_gib": round(got.weights_gib + got.repack_gib, 2),
        "host_weights_gib": round(got.host_gib, 2),
        "activation_gib": round(got.compute_gib, 2),
        "non_torch_gib": round(got.context_gib, 2),
        "cuda_graph_gib": 0.0,
        "kv_cache_gib": round(got.kv_cache_gib, 2),
        "kv_cache_tokens": got.kv_cells,
        "max_concurrency": round(left / one.kv_cache_gib, 2)
        if left > 0 and one.kv_cache_gib
        else 0.0,
        "total_gib": round(total, 2),
        "fits": total <= usable,
        "flash_attn": args.flash_attn,
        "n_ubatch": args.n_ubatch,
        "sequences": sequences,
        # As llama.cpp logs them, to the hundredth of a MiB (the worst device's).
        "buffers_mib": {
            "model": round(got.weights_gib * mib, 2),
            "repack": round(got.repack_gib * mib, 2),
            "kv": round(got.kv_cache_gib * mib, 2),
            "compute": round(got.compute_gib * mib, 2),
            "output": round(got.output_gib * mib, 2),
            "cuda_context": round(got.context_gib * mib, 2),
        },
    }
    if got.swa_cells:
        result["swa_kv_cache_tokens"] = got.swa_cells
    if total > usable:
        result["reason"] = (
            f"a device needs {total:.2f} GiB (weights {got.weights_gib + got.repack_gib:.2f} + KV {got.kv_cache_gib:.2f} "
            f"+ compute {got.compute_gib:.2f}) but has {usable:.2f} GiB: llama.cpp would fail to "
            "allocate its buffers; offload fewer layers, shorten the context or use more devices"
        )
    return result


def render_estimate(result: dict[str, Any]) -> Any:
    """A two-column table of the per-card figures, as a person reads them."""
    from rich.table import Table

    title = f"{result['engine']} · {result['model']} · {result['artifact']}"
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("a card", justify="right")
    labels = [
        ("weights_gib", "weights GiB"),
        ("activation_gib", "activation GiB"),
        ("non_torch_gib", "non-torch GiB"),
        ("cuda_graph_gib", "CUDA graphs GiB"),
        ("kv_cache_gib", "KV cache GiB"),
        ("kv_cache_tokens", "KV cache tokens"),
        ("max_concurrency", "max concurrency"),
    ]
    for key, label in labels:
        if key in result:
            value = result[key]
            table.add_row(label, f"{value:,}" if isinstance(value, int) else str(value))
    for name, value in (result.get("buffers_mib") or {}).items():
        if value:
            table.add_row(f"{name.replace('_', ' ')} buffer MiB", f"{value:,.2f}")
    table.add_row("fits", "[green]yes[/green]" if result.get("fits") else "[red]no[/red]")
    if result.get("reason"):
        table.add_row("why", result["reason"])
    return table


@step("estimate", args=EstimateArgs, render=render_estimate)
def run_estimate(args: EstimateArgs, ctx: StepContext) -> StepOutcome:
    """Load the model and predict the engine's start-up memory."""
    from llmgw_core.script.steps.plan import step_model

    model = step_model(args.model, ctx)
    return StepOutcome(result=estimate_result(model, args))
