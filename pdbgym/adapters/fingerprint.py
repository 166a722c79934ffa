"""Content hashes of model folders: the identity of "the exact weights" an adapter was trained against.

A weights hash covers tensor names, dtypes, shapes and bytes, and nothing else: the same weights saved
in one file or in five shards, with different safetensors metadata, hash the same. It is the sha256 of
the sorted ``name digest`` lines of every tensor (see :func:`safetensors_io.tensor_digest`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from pdbgym.adapters.errors import CorruptArtifactError
from pdbgym.adapters.files import read_json
from pdbgym.adapters.safetensors_io import SafetensorsHeader, iter_chunks, read_header, tensor_digest

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


@dataclass(frozen=True)
class ModelFolder:
    """A model folder's weight files (shard order as on disk) and their validated headers."""

    path: Path
    shards: list[SafetensorsHeader]

    @property
    def tensor_count(self) -> int:
        return sum(len(shard.tensors) for shard in self.shards)

    @property
    def total_bytes(self) -> int:
        return sum(entry.nbytes for shard in self.shards for entry in shard.tensors.values())


def open_model_folder(path: Path) -> ModelFolder:
    """Find and validate the safetensors weights of a model folder (single file or sharded with an index)."""
    path = Path(path)
    if not path.is_dir():
        raise CorruptArtifactError(f"{path}: not a model folder (expected a directory with config.json).")
    if (path / INDEX_FILE).is_file():
        index = read_json(path / INDEX_FILE, "safetensors shard index")
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise CorruptArtifactError(f"{path / INDEX_FILE}: no 'weight_map'; re-save the model.")
        shard_of = cast(dict[str, str], weight_map)  # tensor name -> shard file, as transformers writes it
        names = sorted(set(shard_of.values()))
        shards = [read_header(path / name) for name in names]
        _check_index(path, shard_of, shards)
    elif (path / SINGLE_FILE).is_file():
        shards = [read_header(path / SINGLE_FILE)]
    else:
        raise CorruptArtifactError(
            f"{path}: no {SINGLE_FILE} or {INDEX_FILE}. Only safetensors weights are supported; "
            "re-save with save_pretrained(..., safe_serialization=True)."
        )
    return ModelFolder(path=path, shards=shards)


def _check_index(path: Path, weight_map: Mapping[str, str], shards: list[SafetensorsHeader]) -> None:
    for shard in shards:
        for name in shard.tensors:
            if weight_map.get(name) != shard.path.name:
                raise CorruptArtifactError(f"{path}: tensor {name!r} is in {shard.path.name} but the index disagrees.")
    listed = sum(len(shard.tensors) for shard in shards)
    if listed != len(weight_map):
        raise CorruptArtifactError(f"{path}: the index lists {len(weight_map)} tensors, the shards hold {listed}.")


def combine_digests(digests: Mapping[str, str]) -> str:
    """Order-independent combination of per-tensor digests into one weights hash."""
    lines = "".join(f"{name} {digests[name]}\n" for name in sorted(digests))
    return hashlib.sha256(lines.encode()).hexdigest()


def folder_tensor_digests(folder: ModelFolder, on_bytes: Callable[[int], None] | None = None) -> dict[str, str]:
    """Per-tensor digests of every tensor in ``folder``, read in 16 MiB chunks (memory stays flat)."""
    digests: dict[str, str] = {}
    for shard in folder.shards:
        with open(shard.path, "rb") as handle:
            for entry in shard.tensors.values():
                digests[entry.name] = tensor_digest(entry.name, entry.dtype, entry.shape, iter_chunks(handle, entry))
                if on_bytes is not None:
                    on_bytes(entry.nbytes)
    return digests


def weights_hash(path: Path, on_bytes: Callable[[int], None] | None = None) -> str:
    """The content hash of a model folder's weights."""
    return combine_digests(folder_tensor_digests(open_model_folder(path), on_bytes))
