"""Benchmark: llama.cpp's own buffers beside the `estimate` step's, for real architectures.

Run: `.venv/bin/python tests/benchmarks/bench_llamacpp_truth.py [--keep DIR]`.
Prints a table — case, figure, llama.cpp, estimate, error — and a summary line
`llamacpp-truth: N cases, worst weights X %, KV Y %, compute Z %`, then the
quantiser's recipes beside `recipe_bytes`. Asserts nothing; the bounds are
held by `tests/e2e/test_llamacpp_truth.py` over a subset.

The GGUFs (five architectures, and llama.cpp's own Q8_0, Q4_K_M and Q6_K of
three of them) are written once into a temporary folder (or `--keep DIR`,
reused when there), each loaded once by llama-cpp-python on this CPU; every
case is one context over a loaded model. Where a llama-server is installed
(or `LLMGW_LLAMA_SERVER` names a build) each file is also started with the
plan's own llama-server command. Needs `llama-cpp-python`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import _paths  # noqa: F401  (tests/support on the path)
from llamacpp_truth import (
    ARCHS,
    QUANTS,
    Case,
    estimate_figures,
    llama_cpp_figures,
    llama_server,
    measure,
    measure_server,
    quantize,
    read_artifact,
    within,
    write_gguf,
)

QUANTISED = ("llama", "llama-moe", "gemma3")
FIGURES = ("weights", "repack", "kv", "compute", "output")


def cases() -> list[Case]:
    """Contexts 512 … 32768, one and four sequences, two micro-batches, two KV types, both attentions."""
    found = []
    for flash in (False, True):
        for context in (512, 4096, 16384, 32768):
            found.append(Case(context, 1, 512, "f16", flash))
        found.append(Case(4096, 4, 512, "f16", flash))
        found.append(Case(4096, 1, 1024, "f16", flash))
        found.append(Case(8192, 4, 1024, "f16", flash, swa_full=True))
    found.append(Case(8192, 1, 512, "q8_0", True))
    found.append(Case(8192, 4, 1024, "q8_0", True))
    return found


def models(folder: Path) -> list[Path]:
    """Every GGUF of the run, written (and quantised) unless already in `folder`."""
    paths = []
    for name, arch in ARCHS.items():
        path = folder / f"{name}.gguf"
        if not path.exists():
            started = time.monotonic()
            write_gguf(arch, path)
            print(
                f"wrote {path.name} ({path.stat().st_size / 2**20:,.0f} MiB) in {time.monotonic() - started:.1f} s"
            )
        paths.append(path)
        if name in QUANTISED:
            for file_type in QUANTS:
                target = folder / f"{name}-{file_type}.gguf"
                if not target.exists():
                    started = time.monotonic()
                    quantize(path, target, file_type)
                    print(f"quantised {target.name} in {time.monotonic() - started:.1f} s")
                paths.append(target)
    return paths


class Table:
    """The rows printed so far, and the worst error of each figure."""

    def __init__(self) -> None:
        self.worst = dict.fromkeys(FIGURES, 0.0)
        self.count = self.outside = 0

    def row(self, model: str, label: str, logged: dict, ours: dict) -> None:
        """Print one case's figures, llama.cpp's beside the estimate's."""
        self.count += 1
        truth = llama_cpp_figures(logged)
        for figure in FIGURES:
            real, said = truth[figure], ours[figure]
            error = (said - real) / real * 100 if real else 0.0
            if real >= 1:
                self.worst[figure] = max(self.worst[figure], abs(error))
            mark = "" if within(real, said) else "  OUT OF BOUNDS"
            self.outside += bool(mark)
            print(
                f"{model:18} {label:32} {figure:8} {real:10.2f} {said:10.2f} {error:+7.2f}%{mark}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="write (and reuse) the GGUFs here")
    given = parser.parse_args()
    import llama_cpp

    repack = "x86_64" if "AVX2 = 1" in llama_cpp.llama_print_system_info().decode() else "none"
    with tempfile.TemporaryDirectory(prefix="llamacpp-truth-") as scratch:
        folder = given.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        paths = models(folder)
        written = time.monotonic() - started
        table = Table()
        print(
            f"\n{'model':18} {'case':32} {'figure':8} {'llama.cpp':>10} {'estimate':>10} {'error':>8}"
        )
        started = time.monotonic()
        for path in paths:
            wanted = cases()
            for case, logged in zip(wanted, measure(path, wanted), strict=True):
                if "error" in logged:
                    print(f"{path.stem:18} {case.label:32} llama.cpp refused: {logged['error']}")
                    continue
                table.row(path.stem, case.label, logged, estimate_figures(path, case, repack))
        server = llama_server()
        if server:
            print(f"\nllama-server ({server}), the plan's command, 4 slots of 4,096 tokens:")
            import socket

            for path in paths:
                for flash in (True, False):
                    case = Case(4096, 4, 512, "f16", flash, n_outputs=4)
                    with socket.socket() as probe:
                        probe.bind(("127.0.0.1", 0))
                        port = probe.getsockname()[1]
                    logged = measure_server(server, path, case, port)
                    ours = estimate_figures(path, case, repack)
                    table.row(path.stem, "server " + case.label, logged, ours)
        measured = time.monotonic() - started
        print(f"\n{'file':22} {'llama.cpp MiB':>14} {'recipe MiB':>11} {'error':>8}")
        from llmgw_core.memory.llamacpp import recipe_bytes

        for name in QUANTISED:
            shape = read_artifact(folder / f"{name}.gguf").shape
            for file_type in QUANTS:
                artifact = read_artifact(folder / f"{name}-{file_type}.gguf")
                real = sum(t.n_bytes for part in artifact.gguf_tensors for t in part)
                said = recipe_bytes(shape, file_type)
                print(
                    f"{name + ' ' + file_type:22} {real / 2**20:14.2f} {said / 2**20:11.2f} "
                    f"{(said - real) / real * 100:+7.2f}%"
                )
        worst = table.worst
        print(
            f"\nllamacpp-truth: {table.count} cases, worst weights "
            f"{max(worst['weights'], worst['repack']):.2f} %, KV {worst['kv']:.2f} %, "
            f"compute {worst['compute']:.2f} %, output {worst['output']:.2f} %; "
            f"{table.outside} figures out of bounds (2 % or 8 MiB); files {written:.1f} s, "
            f"loads and estimates {measured:.1f} s"
        )


if __name__ == "__main__":
    main()
