"""Shard-wise merging of an adapter stack into a model folder.

Each weight tensor of the base is read alone, run through every layer of the stack in order (base, then
SFT, then the delta: W_k = merge_k(W_{k-1}), which is exactly what PEFT's load / merge_and_unload / load
sequence does per tensor) and streamed to an output shard of the same layout. Peak memory is therefore
about the largest tensor plus the adapters, not the model. While streaming, the input is hashed: if it
is not exactly the weights the stack was recorded against, nothing is published. Finished shards are
kept in a staging folder, so an interrupted merge resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypedDict, cast

from pdbgym.adapters.errors import AdapterError, LineageError
from pdbgym.adapters.files import read_json
from pdbgym.adapters.fingerprint import INDEX_FILE, ModelFolder, combine_digests, open_model_folder
from pdbgym.adapters.merge_math import merge_module
from pdbgym.adapters.peft_format import AdapterFolder
from pdbgym.adapters.safetensors_io import (
    SafetensorsHeader,
    StreamingWriter,
    digest_torch_tensor,
    read_tensor,
)
from pdbgym.fileio import write_json_atomic

MANIFEST_FILE = "pdbgym_lineage.json"
MANIFEST_FORMAT = "pdbgym-merged-model/1"
_PROGRESS_FILE = "progress.json"


@dataclass(frozen=True)
class StackLayer:
    """One adapter to merge, with its store id and a display label."""

    node_id: str
    label: str
    adapter: AdapterFolder


@dataclass(frozen=True)
class MergeOutcome:
    """What a merge read and wrote: content hashes of input and output weights, merged module counts."""

    input_weights_hash: str
    output_weights_hash: str
    modules_merged: list[int]  # per stack layer, in order


def _check_targets(folder: ModelFolder, stack: list[StackLayer]) -> None:
    present = {name for shard in folder.shards for name in shard.tensors}
    for layer in stack:
        missing = sorted(set(layer.adapter.modules) - present)
        if missing:
            raise AdapterError(
                f"adapter {layer.label} targets {len(missing)} weights that {folder.path} does not have "
                f"(first: {missing[0]}); it was not trained on this architecture."
            )


class ChainEntry(TypedDict):
    """One layer of a merge's chain as its manifest names it: id, label, kind, method and where its files are."""

    id: str
    label: str
    kind: str | None
    method: str | None
    path: str | None


class MergeManifest(TypedDict):
    """What the caller of ``merge_stack`` says about a merge: its target, how (the whole ``chain`` or ``onto`` a
    parent's folder), the base folder, the chain, the store and when."""

    target: str
    target_label: str
    mode: str
    base_path: str
    chain: list[ChainEntry]
    store: str
    created_at: str


class LineageManifest(MergeManifest):
    """``pdbgym_lineage.json``: the merge's manifest with the hashes measured while merging and the modules
    each layer merged."""

    format: str
    input_weights_hash: str
    weights_hash: str
    modules_merged: list[int]


# One shard merged: its tensors' input and output digests by name, the modules each layer merged in it.
ShardProgress = TypedDict("ShardProgress", {"in": dict[str, str], "out": dict[str, str], "counts": list[int]})


class MergeProgress(TypedDict):
    """The staging folder's record of a merge in progress: its plan and the shards done."""

    plan: str
    shards: dict[str, ShardProgress]


def _plan_key(expected_input_hash: str, stack: list[StackLayer]) -> str:
    return hashlib.sha256(json.dumps([expected_input_hash, [s.node_id for s in stack]]).encode()).hexdigest()


def _load_progress(staging: Path, plan_key: str) -> MergeProgress:
    path = staging / _PROGRESS_FILE
    if path.is_file():
        progress = cast(MergeProgress, read_json(path, "merge progress"))  # written by merge_stack
        if progress.get("plan") == plan_key:
            return progress
    shutil.rmtree(staging, ignore_errors=True)  # a different merge left it: start clean
    staging.mkdir(parents=True)
    return {"plan": plan_key, "shards": {}}


def _stream_shard(
    shard: SafetensorsHeader,
    stack: list[StackLayer],
    adapter_handles: Sequence[IO[bytes]],
    writer: StreamingWriter | None,
    counts: list[int],
    on_bytes: Callable[[int], None] | None,
) -> tuple[dict[str, str], dict[str, str]]:
    """Stream one shard through the stack into ``writer`` (or only hash it when None).

    Returns (input digests, output digests) by tensor name; ``counts[i]`` grows by the modules layer i merged.
    """
    in_digests, out_digests = {}, {}
    with open(shard.path, "rb") as handle:
        for entry in shard.tensors.values():
            tensor = read_tensor(handle, entry)
            in_digests[entry.name] = digest_torch_tensor(entry.name, tensor)
            touched = False
            for position, (layer, adapter_handle) in enumerate(zip(stack, adapter_handles, strict=True)):
                delta = layer.adapter.modules.get(entry.name)
                if delta is None:
                    continue
                magnitude = read_tensor(adapter_handle, delta.magnitude) if delta.magnitude else None
                tensor = merge_module(
                    tensor, read_tensor(adapter_handle, delta.lora_a), read_tensor(adapter_handle, delta.lora_b),
                    magnitude, delta.scaling, layer.adapter.fan_in_fan_out,
                )
                counts[position] += 1
                touched = True
            # An untouched tensor is written byte for byte, so its input digest is its output digest.
            out_digests[entry.name] = digest_torch_tensor(entry.name, tensor) if touched else in_digests[entry.name]
            if writer is not None:
                writer.write(entry.name, tensor)
            del tensor
            if on_bytes is not None:
                on_bytes(entry.nbytes)
    return in_digests, out_digests


def _merge_shard(
    shard: SafetensorsHeader,
    stack: list[StackLayer],
    adapter_handles: Sequence[IO[bytes]],
    out_path: Path,
    counts: list[int],
    on_bytes: Callable[[int], None] | None,
) -> tuple[dict[str, str], dict[str, str]]:
    """Stream one shard through the stack to ``out_path`` (same tensor order, dtypes and metadata)."""
    layout = [(e.name, e.dtype, e.shape) for e in shard.tensors.values()]
    writer = StreamingWriter(out_path, layout, shard.metadata)
    try:
        digests = _stream_shard(shard, stack, adapter_handles, writer, counts, on_bytes)
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return digests


def stack_weights_hash(
    base_dir: Path, stack: list[StackLayer], on_bytes: Callable[[int], None] | None = None
) -> tuple[str, str]:
    """(input weights hash, merged weights hash) of ``stack`` over ``base_dir``, computed without writing."""
    folder = open_model_folder(base_dir)
    _check_targets(folder, stack)
    all_in: dict[str, str] = {}
    all_out: dict[str, str] = {}
    counts = [0] * len(stack)
    with ExitStack() as handles:
        adapter_handles = [handles.enter_context(open(layer.adapter.header.path, "rb")) for layer in stack]
        for shard in folder.shards:
            in_digests, out_digests = _stream_shard(shard, stack, adapter_handles, None, counts, on_bytes)
            all_in.update(in_digests)
            all_out.update(out_digests)
    return combine_digests(all_in), combine_digests(all_out)


def merge_stack(
    base_dir: Path,
    stack: list[StackLayer],
    out_dir: Path,
    expected_input_hash: str,
    manifest: MergeManifest,
    on_bytes: Callable[[int], None] | None = None,
) -> MergeOutcome:
    """Merge ``stack`` (in order) onto the weights in ``base_dir`` and publish ``out_dir`` atomically.

    ``expected_input_hash`` is the weights hash the first layer was recorded against; a base whose
    content differs is refused after streaming, before anything is published. ``manifest`` is written
    to ``out_dir/pdbgym_lineage.json`` with the measured hashes added.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise AdapterError(f"{out_dir} already exists and is not empty; choose a new --out folder or remove it.")
    folder = open_model_folder(base_dir)
    _check_targets(folder, stack)
    staging = out_dir.parent / f".{out_dir.name}.partial"
    progress = _load_progress(staging, _plan_key(expected_input_hash, stack))
    counts = [0] * len(stack)
    with ExitStack() as handles:
        adapter_handles = [handles.enter_context(open(layer.adapter.header.path, "rb")) for layer in stack]
        for shard in folder.shards:
            done = progress["shards"].get(shard.path.name)
            if done is not None and (staging / shard.path.name).is_file():
                counts = [c + n for c, n in zip(counts, done["counts"], strict=True)]
                if on_bytes is not None:
                    on_bytes(sum(e.nbytes for e in shard.tensors.values()))
                continue
            shard_counts = [0] * len(stack)
            in_digests, out_digests = _merge_shard(
                shard, stack, adapter_handles, staging / shard.path.name, shard_counts, on_bytes
            )
            counts = [c + n for c, n in zip(counts, shard_counts, strict=True)]
            progress["shards"][shard.path.name] = {"in": in_digests, "out": out_digests, "counts": shard_counts}
            write_json_atomic(staging / _PROGRESS_FILE, progress, indent=2, sort_keys=True)
    all_in = {k: v for s in progress["shards"].values() for k, v in s["in"].items()}
    all_out = {k: v for s in progress["shards"].values() for k, v in s["out"].items()}
    input_hash, output_hash = combine_digests(all_in), combine_digests(all_out)
    if input_hash != expected_input_hash:
        shutil.rmtree(staging, ignore_errors=True)
        raise LineageError(
            f"the weights in {base_dir} hash to {input_hash[:12]}, not {expected_input_hash[:12]}, the weights "
            "this stack was recorded against (the folder changed since registration). Nothing was written; "
            "restore the original weights or register the new folder and the adapters trained on it."
        )
    _copy_side_files(Path(base_dir), staging, {s.path.name for s in folder.shards})
    outcome = MergeOutcome(input_hash, output_hash, counts)
    written: LineageManifest = {**manifest, "format": MANIFEST_FORMAT, "input_weights_hash": input_hash,
                                "weights_hash": output_hash, "modules_merged": counts}
    write_json_atomic(staging / MANIFEST_FILE, written, indent=2, sort_keys=True)
    (staging / _PROGRESS_FILE).unlink()
    if out_dir.exists():
        out_dir.rmdir()
    os.rename(staging, out_dir)
    return outcome


def _copy_side_files(base_dir: Path, staging: Path, shard_names: set[str]) -> None:
    """Copy config, tokenizer and the shard index (same layout, same names) beside the merged shards."""
    for item in base_dir.iterdir():
        if item.name in shard_names or item.name == MANIFEST_FILE or item.name.startswith("."):
            continue
        if item.is_file():
            shutil.copy2(item, staging / item.name)
    if (base_dir / INDEX_FILE).is_file():
        shutil.copy2(base_dir / INDEX_FILE, staging / INDEX_FILE)


def read_manifest(folder: Path) -> LineageManifest:
    """The lineage manifest of a folder that ``pdbgym adapters merge`` produced."""
    path = Path(folder) / MANIFEST_FILE
    if not path.is_file():
        raise AdapterError(f"{folder} has no {MANIFEST_FILE}: it was not produced by `pdbgym adapters merge`.")
    manifest = read_json(path, "lineage manifest")
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise AdapterError(f"{path}: not a {MANIFEST_FORMAT} manifest.")
    return cast(LineageManifest, manifest)  # written by merge_stack, as its format says
