"""llama.cpp's own buffers beside the `estimate` of them: GGUFs of real architectures, loaded.

The harness writes GGUF files with the `gguf` package — random weights, real
architectures and hyper-parameters, sizes of hundreds of MB so that every
buffer llama.cpp allocates is measurable — loads each in llama-cpp-python on
the CPU under several contexts, sequence counts, micro-batches, KV types and
both attentions, and reads the sizes llama.cpp logs: model buffers (mapped
and repacked), KV cache, compute buffer, output buffer. Beside each it puts
what llmgw's `estimate` step predicts from the file's header alone.

Used by `tests/benchmarks/bench_llamacpp_truth.py` (every case, printed as a
table) and `tests/e2e/test_llamacpp_truth.py` (a subset, held to the bounds).

Run as a script it is the measuring side: `python llamacpp_truth.py measure
FILE CASES_JSON` loads FILE once, makes a context per case and prints one
JSON object of the logged figures per case (a process per file, so one
model that llama.cpp rejects costs one line, not the run).
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MIB = 1024 * 1024

BOUND_FRACTION = 0.02
BOUND_MIB = 8.0
"""A figure is right when within 2 % or 8 MiB of llama.cpp's, whichever is larger."""


@dataclass(frozen=True)
class Arch:
    """A real architecture at a measurable size: its GGUF keys and tensors."""

    name: str
    arch: str
    hidden: int
    heads: int
    kv_heads: int
    layers: int
    ffn: int
    vocab: int = 32000
    head_dim: int | None = None
    biases: bool = False
    experts: int = 0
    experts_used: int = 0
    expert_ffn: int = 0
    shared_expert_ffn: int = 0
    sliding_window: int = 0
    tied: bool = False
    mla: dict[str, int] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden // self.heads


ARCHS = {
    # Dense llama with grouped-query attention (a 1B-class shape, narrowed).
    "llama": Arch("llama", "llama", hidden=1024, heads=16, kv_heads=4, layers=16, ffn=2816),
    # Qwen2: attention biases, two KV heads.
    "qwen2": Arch(
        "qwen2", "qwen2", hidden=896, heads=14, kv_heads=2, layers=16, ffn=4864, biases=True
    ),
    # A Mixtral-style mixture of experts: 8 experts, 2 a token.
    "llama-moe": Arch(
        "llama-moe",
        "llama",
        hidden=768,
        heads=12,
        kv_heads=4,
        layers=8,
        ffn=1536,
        experts=8,
        experts_used=2,
        expert_ffn=1536,
    ),
    # Gemma 3: sliding-window attention on five layers of six, a tied head.
    "gemma3": Arch(
        "gemma3",
        "gemma3",
        hidden=1152,
        heads=4,
        kv_heads=1,
        layers=12,
        ffn=6912,
        head_dim=256,
        sliding_window=512,
        tied=True,
    ),
    # DeepSeek-V2-Lite's attention (MLA) and experts, narrowed.
    "deepseek2": Arch(
        "deepseek2",
        "deepseek2",
        hidden=1024,
        heads=16,
        kv_heads=1,
        layers=6,
        ffn=2816,
        experts=8,
        experts_used=2,
        expert_ffn=704,
        shared_expert_ffn=704,
        mla={
            "q_lora_rank": 384,
            "kv_lora_rank": 512,
            "rope": 64,
            "nope": 128,
            "v": 128,
            "leading_dense": 1,
        },
    ),
}


def _tensors(a: Arch) -> dict[str, tuple[int, ...]]:
    """Every tensor the architecture's loader asks for, as numpy shapes (outputs first)."""
    h, d = a.hidden, a.dim
    q, kv = a.heads * d, a.kv_heads * d
    out: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (a.vocab, h),
        "output_norm.weight": (h,),
    }
    if not a.tied:
        out["output.weight"] = (a.vocab, h)
    for b in range(a.layers):
        p = f"blk.{b}."
        out[p + "attn_norm.weight"] = (h,)
        if a.mla:
            m = a.mla
            rank, rope, nope, v = m["kv_lora_rank"], m["rope"], m["nope"], m["v"]
            out[p + "attn_q_a.weight"] = (m["q_lora_rank"], h)
            out[p + "attn_q_a_norm.weight"] = (m["q_lora_rank"],)
            out[p + "attn_q_b.weight"] = (a.heads * (nope + rope), m["q_lora_rank"])
            out[p + "attn_kv_a_mqa.weight"] = (rank + rope, h)
            out[p + "attn_kv_a_norm.weight"] = (rank,)
            out[p + "attn_k_b.weight"] = (a.heads, rank, nope)
            out[p + "attn_v_b.weight"] = (a.heads, v, rank)
            out[p + "attn_output.weight"] = (h, a.heads * v)
        else:
            out[p + "attn_q.weight"] = (q, h)
            out[p + "attn_k.weight"] = (kv, h)
            out[p + "attn_v.weight"] = (kv, h)
            out[p + "attn_output.weight"] = (h, q)
            if a.biases:
                out[p + "attn_q.bias"] = (q,)
                out[p + "attn_k.bias"] = (kv,)
                out[p + "attn_v.bias"] = (kv,)
        if a.arch == "gemma3":
            out[p + "attn_q_norm.weight"] = (d,)
            out[p + "attn_k_norm.weight"] = (d,)
            out[p + "post_attention_norm.weight"] = (h,)
            out[p + "post_ffw_norm.weight"] = (h,)
        out[p + "ffn_norm.weight"] = (h,)
        dense = not a.experts or (a.mla and b < a.mla["leading_dense"])
        if dense:
            out[p + "ffn_gate.weight"] = (a.ffn, h)
            out[p + "ffn_up.weight"] = (a.ffn, h)
            out[p + "ffn_down.weight"] = (h, a.ffn)
            continue
        e, f = a.experts, a.expert_ffn
        out[p + "ffn_gate_inp.weight"] = (e, h)
        out[p + "ffn_gate_exps.weight"] = (e, f, h)
        out[p + "ffn_up_exps.weight"] = (e, f, h)
        out[p + "ffn_down_exps.weight"] = (e, h, f)
        if a.shared_expert_ffn:
            s = a.shared_expert_ffn
            out[p + "ffn_gate_shexp.weight"] = (s, h)
            out[p + "ffn_up_shexp.weight"] = (s, h)
            out[p + "ffn_down_shexp.weight"] = (h, s)
    return out


def write_gguf(a: Arch, path: Path) -> Path:
    """Write `a` as an F16 GGUF (norms and biases F32) with random weights; return the path."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), a.arch)
    writer.add_context_length(32768)
    writer.add_embedding_length(a.hidden)
    writer.add_block_count(a.layers)
    writer.add_feed_forward_length(a.ffn)
    writer.add_head_count(a.heads)
    writer.add_head_count_kv(a.kv_heads)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_vocab_size(a.vocab)
    if a.head_dim:
        writer.add_key_length(a.head_dim)
        writer.add_value_length(a.head_dim)
    if a.experts:
        writer.add_expert_count(a.experts)
        writer.add_expert_used_count(a.experts_used)
        writer.add_expert_feed_forward_length(a.expert_ffn)
    if a.sliding_window:
        writer.add_sliding_window(a.sliding_window)
    if a.mla:
        m = a.mla
        writer.add_q_lora_rank(m["q_lora_rank"])
        writer.add_kv_lora_rank(m["kv_lora_rank"])
        writer.add_key_length(m["kv_lora_rank"] + m["rope"])
        writer.add_value_length(m["kv_lora_rank"])
        writer.add_key_length_mla(m["nope"] + m["rope"])
        writer.add_value_length_mla(m["v"])
        writer.add_rope_dimension_count(m["rope"])
        writer.add_leading_dense_block_count(m["leading_dense"])
        writer.add_expert_shared_count(1)
        writer.add_expert_weights_scale(1.0)
        writer.add_expert_shared_feed_forward_length(a.shared_expert_ffn)
    else:
        writer.add_rope_dimension_count(a.dim)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    tokens += [f"\u2581t{i}" for i in range(a.vocab - len(tokens))]
    types += [1] * (a.vocab - len(types))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * a.vocab)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    # A block of random values tiled: random weights in a blink, not a minute of sampling.
    pool = (np.random.default_rng(22).standard_normal(1 << 20) * 0.02).astype(np.float32)
    for name, shape in _tensors(a).items():
        count = int(np.prod(shape))
        values = np.resize(pool, count).reshape(shape)
        if len(shape) == 1 or name.endswith("_norm.weight") or name.endswith(".bias"):
            writer.add_tensor(name, (values + 1.0) if name.endswith("norm.weight") else values)
        else:
            writer.add_tensor(name, values.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


QUANTS = {"Q8_0": 7, "Q4_K_M": 15, "Q6_K": 18}
"""File types llama.cpp's quantiser makes (`LLAMA_FTYPE_MOSTLY_*`)."""


def quantize(source: Path, target: Path, file_type: str) -> Path:
    """llama.cpp's own recipe for `file_type` (`llama_model_quantize`), as its quantize tool runs it.

    In a process of its own: the quantiser prints a line per tensor from C.
    """
    done = subprocess.run(
        [sys.executable, __file__, "quantize", str(source), str(target), file_type],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0 or not target.exists():
        raise RuntimeError(f"quantising {source.name} to {file_type} failed: {done.stderr[-2000:]}")
    return target


def _quantize_main(source: str, target: str, file_type: str) -> None:
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = 2
    params.ftype = QUANTS[file_type]
    code = llama_cpp.llama_model_quantize(source.encode(), target.encode(), ctypes.byref(params))
    sys.exit(code)


@dataclass(frozen=True)
class Case:
    """One context over one file: the settings llama.cpp and `estimate` are both given."""

    context: int
    sequences: int = 1
    n_ubatch: int = 512
    kv_type: str = "f16"
    flash_attn: bool = False
    swa_full: bool = False
    """llama-server's default is a window-sized cache for sliding layers; llama-cpp-python keeps llama.cpp's full one."""
    n_outputs: int | None = None
    """Logits reserved a micro-batch: all its tokens (the C API's default) or one a slot."""

    @property
    def label(self) -> str:
        fa = "fa" if self.flash_attn else "nofa"
        return f"ctx {self.context} ×{self.sequences} ub {self.n_ubatch} {self.kv_type} {fa}"


_BUFFER = re.compile(r"(\S+)\s+(model|KV|compute|output) buffer size =\s+([0-9.]+) MiB")
_GGML_TYPES = {"f16": 1, "f32": 0, "q8_0": 8, "q4_0": 2, "q5_0": 6, "bf16": 30}


def parse_buffers(log: str) -> dict[str, float]:
    """The buffers llama.cpp logged, MiB, by kind and device: `model CPU_REPACK`, `KV CPU` (summed)."""
    found: dict[str, float] = {}
    for device, kind, mib in _BUFFER.findall(log):
        key = f"{kind} {device}"
        found[key] = round(found.get(key, 0.0) + float(mib), 2)
    return found


def _measure_main(path: str, cases_json: str) -> None:
    import ctypes

    import llama_cpp

    lines: list[str] = []

    @llama_cpp.llama_log_callback
    def collect(level: int, text: bytes, user: Any) -> None:
        lines.append(text.decode(errors="replace"))

    llama_cpp.llama_log_set(collect, ctypes.c_void_p())
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(
        path.encode(), llama_cpp.llama_model_default_params()
    )
    if not model:
        print(json.dumps({"error": "".join(lines[-5:]).strip()}))
        return
    loaded = parse_buffers("".join(lines))
    for raw in json.loads(cases_json):
        case = Case(**raw)
        lines.clear()
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = case.context * case.sequences
        params.n_batch = max(case.n_ubatch, 2048)
        params.n_ubatch = case.n_ubatch
        params.n_seq_max = case.sequences
        params.swa_full = case.swa_full
        params.n_threads = params.n_threads_batch = 2
        params.type_k = params.type_v = _GGML_TYPES[case.kv_type]
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if case.flash_attn
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        context = llama_cpp.llama_init_from_model(model, params)
        figures: dict[str, Any] = dict(loaded)
        if not context:
            figures = {"error": "".join(lines[-3:]).strip()}
        else:
            figures.update(parse_buffers("".join(lines)))
            llama_cpp.llama_free(context)
        print(json.dumps({"case": raw, "figures": figures}), flush=True)
    llama_cpp.llama_model_free(model)


def measure(path: Path, cases: list[Case], timeout_s: float = 600) -> list[dict[str, Any]]:
    """llama.cpp's logged buffers for each case, MiB, from one process that loads `path` once."""
    done = subprocess.run(
        [sys.executable, __file__, "measure", str(path), json.dumps([asdict(c) for c in cases])],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not rows or ("error" in rows[0] and len(rows) == 1):
        why = rows[0]["error"] if rows else done.stderr[-2000:]
        raise RuntimeError(f"llama.cpp did not load {path.name}: {why}")
    return [row["figures"] for row in rows]


def llama_server() -> str | None:
    """A llama-server to measure with: `LLMGW_LLAMA_SERVER`, else `.ci/install-llama-server`'s
    build in this environment (`.venv/llama.cpp/`), else one on PATH (None: none of them)."""
    import os
    import shutil

    built = Path(sys.prefix) / "llama.cpp" / "llama-server"
    named = os.environ.get("LLMGW_LLAMA_SERVER")
    return named or (str(built) if built.is_file() else None) or shutil.which("llama-server")


def measure_server(server: str, path: Path, case: Case, port: int) -> dict[str, float]:
    """llama-server's logged buffers, started with the plan's own command for `case`."""
    import time

    from llmgw_core.engines.planned import planned_argv
    from llmgw_core.memory.need import EngineOptions

    argv = list(
        planned_argv(
            "llama.cpp",
            str(path),
            context=case.context,
            concurrency=case.sequences,
            on_cpu=True,
            http_port=port,
            engine_options=EngineOptions(flash_attn=case.flash_attn, n_ubatch=case.n_ubatch),
        )
    )
    argv[0] = server
    process = subprocess.Popen(
        [*argv, "--verbosity", "4"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 60
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line)
            if "listening on" in line or time.monotonic() > deadline:
                break
    finally:
        process.kill()
        process.wait()
    logged = parse_buffers("".join(seen))
    if "compute CPU" not in logged:
        raise RuntimeError(f"llama-server logged no buffers: {''.join(seen[-10:])}")
    return logged


def _copy_buffer(key: str) -> bool:
    """A buffer of matrices copied out of the mapped file: `CPU_REPACK`, or `AMX` on an AMX CPU."""
    return "REPACK" in key or key == "model AMX"


def llama_cpp_figures(logged: dict[str, float]) -> dict[str, float]:
    """The logged buffers in the estimate's terms: weights, repacked weights, KV, compute, output."""
    return {
        "weights": sum(
            v for k, v in logged.items() if k.startswith("model ") and not _copy_buffer(k)
        ),
        "repack": sum(v for k, v in logged.items() if k.startswith("model ") and _copy_buffer(k)),
        "kv": sum(v for k, v in logged.items() if k.startswith("KV ")),
        "compute": sum(v for k, v in logged.items() if k.startswith("compute ")),
        "output": sum(v for k, v in logged.items() if k.startswith("output ")),
    }


def read_artifact(path: Path) -> Any:
    """The file as the planner sees a GGUF: its header read, its shape and tensors known."""
    from llmgw_core.model.artifacts import Artifact
    from llmgw_core.model.assemble import enrich_gguf
    from llmgw_core.model.local import read_local_gguf

    bare = Artifact(path.stem, "gguf", (path.name,), path.stat().st_size)
    return enrich_gguf(bare, [read_local_gguf(path)])


@functools.cache
def _local_model(path: Path) -> Any:
    """The file as `estimate` loads it (its header read once a run, not once a case)."""
    from llmgw_core.model.local import load_local

    return load_local(str(path), path, read_gguf_headers=True)


def estimate_figures(path: Path, case: Case, cpu_repack: str) -> dict[str, float]:
    """What the `estimate` step says llama.cpp will allocate on the CPU for `case`, MiB."""
    from llmgw_core.script.steps.estimate import EstimateArgs, estimate_result

    model = _local_model(path)
    args = EstimateArgs(
        model=str(path),
        engine="llama.cpp",
        gpu_memory_gib=64,
        cpu=True,
        cpu_repack=cpu_repack,
        max_model_len=case.context,
        sequences=case.sequences,
        n_ubatch=case.n_ubatch,
        kv_cache_dtype=case.kv_type,
        flash_attn=case.flash_attn,
        swa_full=case.swa_full,
        n_outputs=case.n_outputs,
    )
    said = estimate_result(model, args)["buffers_mib"]
    return {
        "weights": said["model"],
        "repack": said["repack"],
        "kv": said["kv"],
        "compute": said["compute"],
        "output": said["output"],
    }


def within(truth: float, ours: float) -> bool:
    """Within 2 % or 8 MiB of llama.cpp's figure, whichever is larger."""
    return abs(truth - ours) <= max(BOUND_FRACTION * truth, BOUND_MIB)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "measure":
    _measure_main(sys.argv[2], sys.argv[3])
if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "quantize":
    _quantize_main(sys.argv[2], sys.argv[3], sys.argv[4])
