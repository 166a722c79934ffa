"""What the ``pdbgym adapters`` commands do, as library calls: register, resolve, and merge by lineage."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from pdbgym.adapters.errors import AdapterError, CorruptArtifactError, LineageError
from pdbgym.adapters.evidence import ParentEvidence, dora_parent_evidence
from pdbgym.adapters.files import read_json
from pdbgym.adapters.fingerprint import open_model_folder, weights_hash
from pdbgym.adapters.merge import (
    MANIFEST_FILE,
    ChainEntry,
    LineageManifest,
    MergeManifest,
    MergeOutcome,
    StackLayer,
    merge_stack,
    read_manifest,
    stack_weights_hash,
)
from pdbgym.adapters.peft_format import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    AdapterFolder,
    adapter_content_hash,
    is_adapter_folder,
    load_adapter,
)
from pdbgym.adapters.store import Lineage, NodeRecord, Recipe, Store, is_full_hash, now_utc
from pdbgym.fileio import JSONValue

# Known recipe fields and the JSON types they must have; other keys are kept as given.
RECIPE_FIELDS: dict[str, tuple[type, ...]] = {
    "corpus_hash": (str,), "seed": (int,), "rank": (int,), "epochs": (int, float), "lr": (int, float),
    "effective_batch": (int,), "context": (int,),
}
ByteProgress = Callable[[int], None] | None


@dataclass
class Registration:
    """The stored record plus what registration noticed (notes) and, for DoRA, the parent evidence."""

    record: NodeRecord
    notes: list[str] = field(default_factory=list)
    evidence: ParentEvidence | None = None


def register_command_hint(path: Path | str) -> str:
    """The command a user should run to give an adapter its lineage."""
    return f"pdbgym adapters register {path} --parent <REF of the exact weights it was trained against> --name NAME"


def load_recipe(path: Path | None, overrides: Mapping[str, JSONValue]) -> Recipe | None:
    """Merge a recipe JSON file with flag values (flags win); unknown keys are kept as given."""
    recipe: dict[str, JSONValue] = {}
    if path is not None:
        loaded = read_json(path, "recipe")
        if not isinstance(loaded, dict):
            raise AdapterError(f"{path}: a recipe must be a JSON object such as {{\"seed\": 42, \"rank\": 24}}.")
        recipe.update(loaded)
    recipe.update({k: v for k, v in overrides.items() if v is not None})
    for name, types in RECIPE_FIELDS.items():
        value = recipe.get(name)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise AdapterError(f"recipe field {name!r} is {value!r}; it must be "
                               f"{' or '.join(t.__name__ for t in types)}.")
    return cast(Recipe, recipe) or None  # each known field of its type, as checked


def lookup(store: Store, ref: str) -> str:
    """Resolve a name, hash or path; an unregistered adapter folder is refused with the register command.

    A training run's folder (``train sft`` / ``train grpo`` ``--out``) stands for the adapter it wrote,
    its ``adapter/``."""
    path = Path(ref)
    if path.is_dir() and not is_adapter_folder(path) and is_adapter_folder(path / "adapter"):
        path = path / "adapter"
    if path.is_dir():
        if is_adapter_folder(path):
            adapter = load_adapter(path)
            node_id = adapter_content_hash(adapter)
            if not store.has(node_id):
                raise LineageError(
                    f"{path} has no recorded lineage. Its {CONFIG_FILE} names base "
                    f"{adapter.named_base or '(none)'!r}, which is not evidence of what it was trained against "
                    f"(an RL delta over an SFT layer names the raw base too). Register it first:\n  "
                    + register_command_hint(path)
                )
            return node_id
        node_id = identify_model_folder(store, path, weights_hash(path))
        if node_id is None:
            raise AdapterError(f"model folder {path} is not registered; run `pdbgym adapters register {path}`.")
        return node_id
    return store.resolve(ref)


def identify_model_folder(store: Store, path: Path, content_hash: str) -> str | None:
    """The artifact whose weights a model folder holds: a registered base, or a stack it is the merge of.

    A merged folder counts by content: the store recorded its hash when it was written (or computed it),
    or the folder's own manifest names the stack and its hash still matches.
    """
    if store.has(content_hash):
        return content_hash
    merged_from = store.find_by_weights(content_hash)
    if merged_from:
        return merged_from[0]
    if (path / MANIFEST_FILE).is_file():
        manifest = read_manifest(path)
        if manifest.get("weights_hash") == content_hash:
            return manifest["target"]
    return None


def resolve_parent(store: Store, ref: str, notes: list[str], on_bytes: ByteProgress = None) -> str:
    """The parent id for a registration; a full hash not in the store is allowed (flagged unservable)."""
    path = Path(ref)
    if path.is_dir() and not is_adapter_folder(path):
        content_hash = weights_hash(path, on_bytes)
        node_id = identify_model_folder(store, path, content_hash)
        if node_id is None:
            register_model(store, path, [], notes, content_hash)
            notes.append(f"registered the parent model folder {path} as base {content_hash[:12]}")
            return content_hash
        if node_id != content_hash:
            notes.append(f"{path} holds the merged weights of {store.label(node_id) if store.has(node_id) else node_id[:12]}; "
                         "that stack is recorded as the parent")
        return node_id
    try:
        return lookup(store, ref)
    except LineageError:
        raise
    except AdapterError:
        if is_full_hash(ref):
            notes.append(f"parent {ref[:12]} is not in the store: registered as UNSERVABLE until it is registered")
            return ref.lower()
        raise


def register_model(store: Store, path: Path, names: list[str], notes: list[str], node_id: str | None = None,
                   on_bytes: ByteProgress = None) -> NodeRecord:
    """Register a model folder as a base reference (its files stay where they are; the store records them)."""
    folder = open_model_folder(path)
    node_id = node_id or weights_hash(path, on_bytes)
    config_path = Path(path) / "config.json"
    config = read_json(config_path, "model config") if config_path.is_file() else {}
    architectures = config.get("architectures") if isinstance(config, dict) else None
    files = {s.path.name: s.path.stat().st_size for s in folder.shards}
    record: NodeRecord = store.get(node_id) if store.has(node_id) else {
        "id": node_id, "kind": "model", "parent": None, "registered_at": now_utc(), "recipe": None,
        "model": {"path": str(Path(path).resolve()), "files": files, "tensor_count": folder.tensor_count,
                  "total_bytes": folder.total_bytes, "architectures": architectures},
    }
    if record["model"]["path"] != str(Path(path).resolve()):
        notes.append(f"already registered at {record['model']['path']}; the store keeps that reference")
    store.put_node(record, names)
    return record


def register_path(store: Store, path: Path, parent_ref: str | None, names: list[str],
                  recipe: Recipe | None, on_bytes: ByteProgress = None) -> Registration:
    """Register an adapter (with its parent) or a model folder (a base, no parent)."""
    path = Path(path)
    notes: list[str] = []
    if not is_adapter_folder(path):
        if parent_ref is not None:
            raise AdapterError(f"{path} is a model folder, a base: it takes no --parent. Register adapters on top of it.")
        content_hash = weights_hash(path, on_bytes)
        merged_from = identify_model_folder(store, path, content_hash)
        if merged_from not in (None, content_hash):
            notes.append(f"{path} holds the merged weights of {merged_from[:12]}; to record an adapter trained on "
                         f"it, pass --parent {merged_from[:12]} (or this folder) and its chain is kept")
        return Registration(register_model(store, path, names, notes, content_hash), notes)
    adapter = load_adapter(path)
    node_id = adapter_content_hash(adapter)
    if parent_ref is None:
        raise AdapterError(
            f"{path}: --parent is required. Its {CONFIG_FILE} names base {adapter.named_base!r}, but that is "
            "not evidence of what it was trained against; give the exact parent (a name, a hash, or a folder)."
        )
    parent = resolve_parent(store, parent_ref, notes, on_bytes)
    if parent == node_id:
        raise AdapterError(f"{path} cannot be its own parent.")
    conflict = store.parent_conflict(node_id, parent, str(path.resolve()))  # checked again under the store lock
    if conflict is not None:
        raise conflict
    files = store.copy_adapter_files(node_id, path, [CONFIG_FILE, WEIGHTS_FILE])
    record: NodeRecord = (store.get(node_id) if store.has(node_id)
                          else {"id": node_id, "kind": "adapter", "registered_at": now_utc()})
    record.update({
        "parent": parent, "source": str(path.resolve()), "recipe": recipe or record.get("recipe"),
        "adapter": {"method": adapter.method, "r": adapter.config["r"], "lora_alpha": adapter.config["lora_alpha"],
                    "use_rslora": bool(adapter.config.get("use_rslora")), "fan_in_fan_out": adapter.fan_in_fan_out,
                    "target_modules": adapter.config.get("target_modules"), "modules": len(adapter.modules),
                    "tensor_count": len(adapter.header.tensors), "named_base": adapter.named_base, "files": files},
    })
    registration = Registration(record, notes)
    if adapter.use_dora:
        registration.evidence = _dora_evidence(store, parent, adapter, notes)
        record["evidence"] = registration.evidence.as_dict() if registration.evidence else None
    store.put_node(record, names)
    return registration


def _dora_evidence(store: Store, parent: str, adapter: AdapterFolder, notes: list[str]) -> ParentEvidence | None:
    chain = store.lineage(parent)
    if not chain.servable:
        notes.append("DoRA parent evidence not checked: the claimed parent chain is not complete in the store")
        return None
    base = chain.layers[0].record
    assert base is not None
    layers = stack_layers(store, chain)
    return dora_parent_evidence(base["model"]["path"], layers, adapter, store.label(base["id"]))


def stack_layers(store: Store, chain: Lineage) -> list[StackLayer]:
    """The adapters of a servable chain (everything above the base), loaded from the store's copies.

    Each copy is re-hashed: a stored file whose bytes changed but not its size (lineage checks sizes
    only) must not be merged under the id of the adapter it no longer is.
    """
    layers = []
    for layer in chain.layers[1:]:
        folder = store.object_dir(layer.node_id)
        adapter = load_adapter(folder)
        actual = adapter_content_hash(adapter)
        if actual != layer.node_id:
            raise CorruptArtifactError(
                f"the stored copy of {store.label(layer.node_id)} under {folder} has changed since registration "
                f"(its content hashes to {actual[:12]}); restore it from the original adapter folder with "
                f"`cp ORIGINAL/* {folder}/`, or register that folder again into a fresh store"
            )
        layers.append(StackLayer(layer.node_id, store.label(layer.node_id), adapter))
    return layers


def _manifest_chain(store: Store, chain: Lineage) -> list[ChainEntry]:
    entries: list[ChainEntry] = []
    for layer in chain.layers:
        record = layer.record
        kind = record.get("kind") if record is not None else None
        adapter = record.get("adapter") if record is not None else None
        model = record.get("model") if record is not None else None
        entries.append({"id": layer.node_id, "label": store.label(layer.node_id), "kind": kind,
                        "method": adapter.get("method") if adapter else None,
                        "path": str(store.object_dir(layer.node_id)) if kind == "adapter"
                        else model.get("path") if model else None})
    return entries


def merge_ref(store: Store, ref: str, out_dir: Path, onto: Path | None = None,
              on_bytes: ByteProgress = None) -> tuple[MergeOutcome, LineageManifest]:
    """Merge REF's whole recorded chain, or REF alone onto a folder holding exactly its parent's weights."""
    node_id = lookup(store, ref)
    record = store.get(node_id)
    if record["kind"] != "adapter":
        raise AdapterError(f"{store.label(node_id)} is a base model; there is nothing to merge.")
    chain = store.lineage(node_id)
    if onto is None:
        if not chain.servable:
            raise LineageError(f"{store.label(node_id)} is unservable: " + " ".join(chain.problems))
        base = chain.layers[0].record
        assert base is not None
        base_path, expected, layers, merged = Path(base["model"]["path"]), base["id"], stack_layers(store, chain), chain
    else:
        if chain.layers[-1].problem:
            raise LineageError(chain.layers[-1].problem)
        expected = check_onto(store, node_id, Path(onto), on_bytes)
        base_path, layers = Path(onto), stack_layers(store, Lineage(chain.layers[-2:]))
        merged = Lineage(chain.layers[-2:])
    manifest: MergeManifest = {"target": node_id, "target_label": store.label(node_id), "mode": "onto" if onto else "chain",
                "base_path": str(base_path.resolve()), "chain": _manifest_chain(store, merged),
                "store": str(store.root.resolve()), "created_at": now_utc()}
    outcome = merge_stack(base_path, layers, out_dir, expected, manifest, on_bytes)
    store.add_materialization(node_id, outcome.output_weights_hash, Path(out_dir).resolve())
    return outcome, read_manifest(out_dir)


def check_onto(store: Store, node_id: str, model: Path, on_bytes: ByteProgress = None) -> str:
    """Return MODEL's weights hash if it is exactly REF's recorded parent; otherwise refuse and explain why."""
    parent = store.get(node_id)["parent"]
    actual = weights_hash(model, on_bytes)
    if actual == parent or parent in store.find_by_weights(actual) or _manifest_vouches(model, parent, actual):
        return actual
    if _parent_merge_hash(store, parent) == actual:
        return actual
    label = store.label(node_id)
    what = [store.label(i) for i in store.find_by_weights(actual)]
    is_what = f"the weights of {', '.join(what)}" if what else "weights the store does not know"
    parent_label = store.label(parent) if store.has(parent) else f"{parent[:12]} (not in the store)"
    raise LineageError(
        f"refused: {model} holds {is_what} (hash {actual[:12]}), but {label} was trained against "
        f"{parent_label}. Merging it there would produce a model that never existed. Merge the whole "
        f"chain with `pdbgym adapters merge {label.split(' ')[0]} --out DIR`, or pass --onto a folder "
        "produced by merging its parent."
    )


def _parent_merge_hash(store: Store, parent: str) -> str | None:
    """The hash of the parent chain's merged weights, computed by streaming (and remembered in the store)."""
    if not store.has(parent) or store.get(parent)["kind"] != "adapter":
        return None
    chain = store.lineage(parent)
    if not chain.servable:
        return None
    base = chain.layers[0].record
    assert base is not None
    _, merged = stack_weights_hash(Path(base["model"]["path"]), stack_layers(store, chain))
    store.add_materialization(parent, merged, None)
    return merged


def _manifest_vouches(model: Path, parent: str, actual: str) -> bool:
    # A folder merged elsewhere carries its manifest; its content hash must still match what it claims.
    if not (model / MANIFEST_FILE).is_file():
        return False
    manifest = read_manifest(model)
    return manifest.get("target") == parent and manifest.get("weights_hash") == actual


def describe_recipe(recipe: Recipe | None) -> str:
    """A one-line rendering of a recipe for tables."""
    return json.dumps(recipe, sort_keys=True) if recipe else "-"
