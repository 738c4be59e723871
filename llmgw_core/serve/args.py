"""What an operator may say about a replica to serve, as one strict model (a `serve` step,
a service document): the model, its context, its layout, its environment, its key."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from llmgw_core.arguments import NAME_PATTERN, ModelRef, StrictArgs
from llmgw_core.engines.flags import checked_engine_args
from llmgw_core.errors import BadInput
from llmgw_core.serve.disagg_args import DisaggregationArgs, checked_in_model
from llmgw_core.serve.keys import ENV_NAME


class AdapterArg(StrictArgs):
    """One LoRA adapter to serve beside the model: `{name, source, file?}`."""

    name: str = Field(pattern=NAME_PATTERN)
    """What clients ask for it by (`model: NAME`)."""
    source: ModelRef
    """A PEFT adapter's folder, a GGUF adapter file, or a Hub `org/name[@revision]`."""
    file: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-][A-Za-z0-9_./-]{0,255}\.gguf$")
    """On the Hub: the repository's GGUF adapter file (None for PEFT files)."""


class AdapterFields(StrictArgs):
    """LoRA adapters and their slots: what `plan`, `serve` and a service all take, checked alike."""

    adapters: list[AdapterArg] = Field(default_factory=list, max_length=64)
    """LoRA adapters served beside the model (each read from its own files)."""
    max_loras: int | None = Field(default=None, ge=1, le=256)
    """Adapters one batch may use (vLLM's `--max-loras`, SGLang's `--max-loras-per-batch`): the
    slots every card keeps; None for one a given adapter."""
    max_lora_rank: int | None = Field(default=None, ge=1, le=512)
    """The rank every slot is made for; None for the largest adapter's."""

    @model_validator(mode="after")
    def _adapters_named_once(self) -> AdapterFields:
        names = [a.name for a in self.adapters]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"adapter {twice[0]!r} is named twice")
        if (self.max_loras or self.max_lora_rank) and not self.adapters:
            raise ValueError("max_loras and max_lora_rank size adapters: give adapters: too")
        return self


class LayoutFields(AdapterFields):
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
    engine_args: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """The engine's own flags (`engines.flags`: known, typed, never llmgw's own); they need
    `engine:`, as they are that engine's."""
    disaggregation: DisaggregationArgs | None = None
    """Prefill and decode workers apart (`serve.disagg_args`); None: every replica does both."""

    @model_validator(mode="after")
    def _engine_args_checked(self) -> LayoutFields:
        if self.engine_args:
            if self.engine is None:
                raise ValueError("engine_args needs engine: (the flags are that engine's)")
            try:
                checked_engine_args(self.engine, self.engine_args)
            except BadInput as exc:
                raise ValueError(exc.sentence()) from None
        checked_in_model(self.disaggregation, self.engine, self.gpus)
        return self


class ServeFields(LayoutFields):
    """The arguments `serve` and a service share (the step adds its name, wait and dry run)."""

    env: dict[str, str] = Field(default_factory=dict)
    fallbacks: int = Field(default=0, ge=0, le=16)
    timeout: float = Field(default=1200.0, gt=0, le=86_400)
    all_reduce: bool = False
    rails: Literal["tested", "all"] = "tested"
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME)
    cluster: str | None = Field(default=None, pattern=NAME_PATTERN)
    """A Slurm cluster of the inventory: each replica is one job there (docs/slurm.md)."""
    wait_s: float = Field(default=600.0, ge=0, le=7 * 86400)
    """How long a replica's job may wait in Slurm's queue before the start gives up."""

    @model_validator(mode="after")
    def _split_on_ssh_nodes(self) -> ServeFields:
        # A split's workers are placed on the fleet's SSH nodes; given a cluster too, they would
        # start there silently, not as the cluster's jobs.
        if self.cluster is not None and self.disaggregation is not None:
            raise ValueError(
                "disaggregation on a Slurm cluster is not supported yet: leave out `cluster`"
                " to split over SSH nodes, or `disaggregation` to serve one job on the cluster"
            )
        return self


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
    "engine_args",
    "max_loras",
    "max_lora_rank",
    "disaggregation",
    "cluster",
)
"""The fields whose change needs the engines started again (the others steer the start only:
fallbacks, timeout, the all-reduce check, the rails)."""

ADDED_RESTART_FIELDS = frozenset({"max_loras", "max_lora_rank", "disaggregation", "cluster"})
"""Restart fields added after services were first recorded: hashed only where set, so a
service that does not use them keeps its hash."""
