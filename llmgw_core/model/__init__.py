"""A model's shape and servable artifacts, from a Hub repository, a directory or a GGUF file.

`load_model` (in `source`) is the entry; `shape` (reading `config.json` into a
`model_shape.ModelShape`, with `config_numbers` and `family_rules`) and
`artifacts` are pure.
"""

from __future__ import annotations

from llmgw_core.model.artifacts import Artifact
from llmgw_core.model.model_shape import MlaShape, ModelShape
from llmgw_core.model.quantization import Quantization
from llmgw_core.model.shape import shape_from_config
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
