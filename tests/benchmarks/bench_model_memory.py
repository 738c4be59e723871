"""Prints how long reading shapes and sizing memory take, and what a GGUF header read fetches.

Run: .venv/bin/python tests/benchmarks/bench_model_memory.py
Not collected by pytest; figures only, no assertions.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
import _paths  # noqa: F401, E402  (tests/support on the path)
from header_ggufs import write_tiny_llama  # noqa: E402

from llmgw_core.memory import Layout, card_need  # noqa: E402
from llmgw_core.memory.vllm import estimate  # noqa: E402
from llmgw_core.model.artifacts import Artifact  # noqa: E402
from llmgw_core.model.local import read_local_gguf  # noqa: E402
from llmgw_core.model.params import count_parameters, weights_bytes_from_params  # noqa: E402
from llmgw_core.model.shape import shape_from_config  # noqa: E402

MODELS = REPO.parent / "shared" / "fixtures" / "models"


def _timed(label: str, count: int, action) -> None:
    start = time.perf_counter()
    for _ in range(count):
        action()
    elapsed = time.perf_counter() - start
    print(f"{label:55s} {elapsed / count * 1e6:10.1f} µs each ({count} runs)")


def main() -> None:
    configs = [
        json.loads(p.read_text())
        for p in sorted(MODELS.glob("*/config.json"))
        if "num_hidden_layers" in p.read_text() or "text_config" in p.read_text()
    ]
    _timed(f"shape_from_config, {len(configs)} fixture configs", 20,
           lambda: [shape_from_config(c) for c in configs])  # fmt: skip
    shape = shape_from_config(
        json.loads((MODELS / "deepseek-ai--DeepSeek-V3" / "config.json").read_text())
    )
    size = weights_bytes_from_params(count_parameters(shape), shape)
    _timed("vllm.estimate DeepSeek-V3 TP8 (61 layers, MoE)", 200,
           lambda: estimate(shape, size, gpu_memory_gib=139.81, tensor_parallel=8, max_model_len=32768))  # fmt: skip
    gemma = shape_from_config(
        json.loads((MODELS / "google--gemma-3-27b-it" / "config.json").read_text())
    )
    artifact = Artifact("original", "safetensors", (), 54_864_813_280, shape=gemma)
    _timed("card_need vllm gemma-3-27b (hybrid) TP2", 500,
           lambda: card_need("vllm", artifact, gemma, Layout(tensor_parallel=2), context=32768,
                             card_memory_gib=79.19))  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        path = write_tiny_llama(Path(folder) / "bench.Q8_0.gguf", layers=8, hidden=1024, ffn=4096,
                                vocab=128256)  # fmt: skip
        start = time.perf_counter()
        header = read_local_gguf(path)
        elapsed = time.perf_counter() - start
        print(
            f"GGUF header, 128,256-token vocabulary: fetched {header.bytes_fetched / 2**20:.1f} MiB "
            f"in {header.fetches} reads of a {path.stat().st_size / 2**20:.0f} MiB file, {elapsed * 1e3:.0f} ms"
        )


if __name__ == "__main__":
    main()
