"""A model's shape and servable artifacts, from a Hub repository, a directory or a GGUF file.

`load_model` (in `source`) is the entry; `shape` and `artifacts` are pure.
"""

from __future__ import annotations

from llmgw_core.model.artifacts import Artifact
from llmgw_core.model.quantization import Quantization
from llmgw_core.model.shape import MlaShape, ModelShape, shape_from_config
from llmgw_core.model.source import ModelInfo, load_model

__all__ = [
    "Artifact",
    "MlaShape",
    "ModelInfo",
    "ModelShape",
    "Quantization",
    "load_model",
    "shape_from_config",
]
