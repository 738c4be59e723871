"""Models known offline: `catalog:org/name` plans a model from facts shipped with the product.

A plan needs a model's shape and the bytes of its files. Those normally come
from the Hub; for the demo fleet, examples and tests that must run without a
network, the catalog holds them for the well-known models (`entries`, written
as `facts` describes), each under its Hub id.

Ways out of the same facts:
* `catalog_model(ref)` — a `ShippedModel` (a `ModelInfo`) built by the model
  package's own readers (shape from the config keys, artifacts from the file
  listing, or the weights counted from the architecture where no total is
  published), so a catalog model is planned exactly like one read from the Hub;
* `write_model_dir(ref, folder)` — the same model as a local directory
  (`config.json`, the index, other small JSON files, and empty placeholders
  for the weight files) for anything that wants a directory;
* `resolve.resolve_model(ref)` — the one rule deciding between the catalog,
  a local path and the Hub.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llmgw_core.catalog.entries import CATALOG
from llmgw_core.catalog.facts import CatalogModel
from llmgw_core.errors import BadInput
from llmgw_core.model.artifacts import RepoFile, artifacts_from_listing
from llmgw_core.model.assemble import ModelInfo, counted_artifact
from llmgw_core.model.params import count_parameters
from llmgw_core.model.shape import shape_from_config

PREFIX = "catalog:"
SHIPPED_NOTE = "from the shipped catalog"


@dataclass(frozen=True)
class ShippedModel(ModelInfo):
    """A model read from the shipped facts rather than the Hub or a directory.

    Attributes:
        note: how it was reached ("from the shipped catalog (offline)"), for the plan to show.
        source: where the catalog's figures come from.
    """

    note: str = SHIPPED_NOTE
    source: str = ""


def is_catalog_ref(ref: str) -> bool:
    """True for `catalog:org/name`."""
    return ref.strip().startswith(PREFIX)


def known_models() -> tuple[str, ...]:
    """The repository ids the catalog knows."""
    return tuple(entry.repo_id for entry in CATALOG)


def catalog_entry(repo_id: str) -> CatalogModel | None:
    """The shipped record of a Hub id (any case, with or without `catalog:`), None when unknown."""
    wanted = repo_id.strip().removeprefix(PREFIX).partition("@")[0].lower()
    return next((entry for entry in CATALOG if entry.repo_id.lower() == wanted), None)


def _entry(ref: str) -> CatalogModel:
    repo_id = ref.strip().removeprefix(PREFIX)
    entry = catalog_entry(repo_id)
    if entry is not None:
        return entry
    raise BadInput(
        f"the offline catalog has no model {repo_id!r}",
        f"use one of {', '.join(known_models())}, or a Hub id or directory without `catalog:`",
    )


def _listing(entry: CatalogModel) -> tuple[list[RepoFile], list[str]]:
    """The weight files of an entry, with sizes, and the safetensors shard names."""
    files: list[RepoFile] = []
    shards: list[str] = []
    if entry.safetensors_bytes:
        count = entry.safetensors_shards
        share = entry.safetensors_bytes // count
        for number in range(1, count + 1):
            name = (
                f"model-{number:05d}-of-{count:05d}.safetensors"
                if count > 1
                else "model.safetensors"
            )
            size = share if number < count else entry.safetensors_bytes - share * (count - 1)
            files.append(RepoFile(name, size))
            shards.append(name)
    files.extend(RepoFile(name, size) for name, size in entry.gguf_files.items())
    return files, shards


def catalog_model(ref: str, *, note: str = "") -> ShippedModel:
    """The model a `catalog:` reference (or a Hub id it knows) names, read from the shipped facts.

    Args:
        ref: `catalog:org/name`, or `org/name` when the resolver falls back offline.
        note: how the model was reached, shown with the plan; "from the shipped catalog" by default.

    Raises:
        BadInput: the catalog does not know it (naming those it knows).
    """
    entry = _entry(ref)
    shape = shape_from_config(entry.config, extra_files=entry.extra_files)
    files, shards = _listing(entry)
    parameters = entry.parameters or count_parameters(shape).total
    artifacts = artifacts_from_listing(
        files,
        shape=shape,
        index_total_size=entry.safetensors_bytes,
        index_shards=shards,
        param_count=parameters,
    )
    if not entry.safetensors_bytes and not entry.gguf_files:
        # No published total: the model package counts the weights from the architecture.
        artifacts = (counted_artifact(shape), *artifacts)
    return ShippedModel(
        ref=ref,
        repo_id=entry.repo_id,
        revision=None,
        local_dir=None,
        shape=shape,
        artifacts=artifacts,
        note=note or SHIPPED_NOTE,
        source=entry.source,
    )


def write_model_dir(ref: str, folder: Path) -> Path:
    """Write a catalog model as a local model directory under `folder` and return it.

    The weight files are empty placeholders: for a safetensors model the
    index's `total_size` carries the bytes that matter, so `load_model` on the
    directory reads the same model as `catalog_model`. GGUF placeholders carry
    no size; plan a GGUF repository through `catalog:` instead.
    """
    entry = _entry(ref)
    target = folder / entry.repo_id.replace("/", "--")
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps(entry.config, indent=2) + "\n", encoding="utf-8")
    for name, body in entry.extra_files.items():
        (target / name).write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    files, shards = _listing(entry)
    if entry.safetensors_bytes:
        index = {
            "metadata": {"total_size": entry.safetensors_bytes},
            "weight_map": {f"shard.{i}": name for i, name in enumerate(shards)},
        }
        (target / "model.safetensors.index.json").write_text(
            json.dumps(index, indent=2) + "\n", encoding="utf-8"
        )
    for file in files:
        (target / file.path).touch()
    return target
