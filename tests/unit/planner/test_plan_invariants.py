"""Every way offered for every real model can load: checked on the shared fixture repositories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmgw_core.model.artifacts import RepoFile, artifacts_from_listing
from llmgw_core.model.shape import is_full_config, shape_from_config
from llmgw_core.model.source import ModelInfo
from llmgw_core.planner.gpu_classes import gpu_class
from llmgw_core.planner.plan import plan
from llmgw_core.planner.pools import described_fleet
from llmgw_core.planner.ways import width_refusal

MIXED_FLEET = [
    {"name": "dgx", "count": 2, "gpu": "h100-80g", "gpus": 8, "fabric": "ib-a"},
    {"name": "amp", "count": 2, "gpu": "a100-80g", "gpus": 8, "fabric": "ib-b"},
    {"name": "nvl", "count": 18, "gpu": "gb200-186g", "gpus": 4, "nvlink_domain": "nvl72-a"},
    {"name": "a100m", "gpu": "a100-80g-mig-3g.40gb", "gpus": 2},
    {"name": "pcie", "gpu": "l40s-48g", "gpus": 4, "nvlink": False},
    {"name": "old", "gpu": "t4-16g", "gpus": 4},
    {"name": "cpu1", "gpus": 0, "memory_gib": 512},
]


def _fixture_models(models_dir: Path) -> list[ModelInfo]:
    models = []
    for folder in sorted(p for p in models_dir.iterdir() if p.is_dir()):
        listing_file = folder / "files.json"
        if not listing_file.exists():
            continue
        config_file = folder / "config.json"
        config = (
            json.loads(config_file.read_text(encoding="utf-8")) if config_file.exists() else None
        )
        extra = {}
        for name in ("quantize_config.json", "hf_quant_config.json"):
            if (folder / name).exists():
                extra[name] = json.loads((folder / name).read_text(encoding="utf-8"))
        shape = (
            shape_from_config(config, extra_files=extra)
            if config and is_full_config(config)
            else None
        )
        files = [
            RepoFile(f["path"], f["size"])
            for f in json.loads(listing_file.read_text(encoding="utf-8"))
        ]
        index_file = folder / "model.safetensors.index.json"
        total = None
        if index_file.exists():
            total = (
                json.loads(index_file.read_text(encoding="utf-8"))
                .get("metadata", {})
                .get("total_size")
            )
        artifacts = artifacts_from_listing(files, shape=shape, index_total_size=total)
        repo = folder.name.replace("--", "/", 1)
        models.append(ModelInfo(repo, repo, None, None, shape, artifacts))
    return models


def test_every_way_offered_for_a_real_repository_can_load(models_dir):
    fleet = described_fleet(MIXED_FLEET)
    checked = 0
    for model in _fixture_models(models_dir):
        if model.shape is None:
            continue  # a GGUF-only listing: its shape comes from a header, read by the model package
        context = min(8192, model.shape.max_context)
        result = plan(model, fleet, context=context)
        for way in result.options:
            checked += 1
            artifact = next(a for a in model.artifacts if a.name == way.artifact)
            where = f"{model.ref} {way.artifact} {way.label()} {way.layout_text()}"
            if artifact.format == "gguf":
                assert way.engine == "llama.cpp" and way.needs_download, where
                assert way.serve.startswith("llama-server --model models/"), where
                continue
            assert way.engine in ("vllm", "sglang"), where
            if way.on_cpu:
                assert way.engine == "vllm" and artifact.quantization is None, where
                continue
            card = gpu_class(way.gpu_class)
            quant = artifact.quantization
            if quant is not None and quant.min_compute_capability is not None:
                assert card.compute_capability >= quant.min_compute_capability, where
            if quant is not None and quant.vllm_flag and way.engine == "vllm":
                assert f"--quantization {quant.vllm_flag}" in way.serve, where
            assert width_refusal(model.shape, way.tensor_parallel, quant) is None, where
            assert way.expert_parallel == (model.shape.is_moe and way.tensor_parallel > 1), where
            if card.is_mig:
                assert way.cards == 1, where
            # Cards without NVLink split a layer over PCIe, and the way says so.
            assert way.over_pcie == (not card.nvlink and way.tensor_parallel > 1), where
            assert ("over PCIe" in way.layout_text()) == way.over_pcie, where
            if card.compute_capability < 8.0 and model.shape.dtype == "bfloat16" and quant is None:
                assert "--dtype half" in way.serve, where
            assert way.per_card_gib <= way.usable_gib, where
            if way.engine == "vllm":
                assert f"--tensor-parallel-size {way.tensor_parallel}" in way.serve, where
                assert f"--pipeline-parallel-size {way.pipeline_parallel}" in way.serve, where
    if checked == 0:
        pytest.skip("no fixture repository with a file listing and a config")
    assert checked > 20
