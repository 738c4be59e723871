"""What an operator may say about a replica to serve, as one strict model (a `serve` step,
a service document): the model, its context, its layout, its environment, its key."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from llmgw_core.arguments import ModelRef, StrictArgs
from llmgw_core.serve.keys import ENV_NAME


class LayoutFields(StrictArgs):
    """The model and how it is laid out: what `serve`, a service and `explain` all take."""

    model: ModelRef
    format: Literal["gguf", "safetensors"] | None = None
    context: int | None = Field(default=None, gt=0, le=16_777_216)
    concurrency: int = Field(default=1, ge=1, le=65_536)
    engine: Literal["vllm", "sglang", "llama.cpp"] | None = None
    artifact: str | None = None
    gpu_class: str | None = None
    gpus: int | None = Field(default=None, ge=1, le=1024)
    nodes: int | None = Field(default=None, ge=1, le=4096)


class ServeFields(LayoutFields):
    """The arguments `serve` and a service share (the step adds its name, wait and dry run)."""

    env: dict[str, str] = Field(default_factory=dict)
    fallbacks: int = Field(default=0, ge=0, le=16)
    timeout: float = Field(default=1200.0, gt=0, le=86_400)
    all_reduce: bool = False
    rails: Literal["tested", "all"] = "tested"
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME)


RESTART_FIELDS = (
    "model",
    "format",
    "context",
    "concurrency",
    "engine",
    "artifact",
    "gpu_class",
    "gpus",
    "nodes",
    "env",
    "api_key_env",
)
"""The fields whose change needs the engines started again (the others steer the start only:
fallbacks, timeout, the all-reduce check, the rails)."""
