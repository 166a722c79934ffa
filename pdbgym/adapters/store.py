"""The local content-addressed artifact store: adapters with their parent chain, and base references.

Layout (under ``$PDBGYM_HOME/adapters`` or ``--store DIR``)::

    nodes/<id>.json        one record per artifact: kind, parent id, names, config summary, recipe, evidence
    objects/<id>/          the adapter's own files, copied in (adapters are small; bases are referenced)
    names.json             name -> id

An adapter's id is its content hash (tensors + the config fields that change the math); a model's id is
its weights hash. An adapter records the id of the exact weights it was trained against as ``parent``;
that parent may be absent from the store, which makes the adapter (and everything above it) unservable.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NotRequired, TypedDict, cast

from pdbgym.adapters.errors import AdapterError, LineageError
from pdbgym.adapters.files import read_json
from pdbgym.fileio import JSONValue, write_json_atomic
from pdbgym.paths import pdbgym_home

_FULL_HASH = re.compile(r"^[0-9a-f]{64}$")
_MIN_PREFIX = 6


class ModelInfo(TypedDict):
    """A base's record: where its folder is, its weight files' sizes, and what its config says it is."""

    path: str
    files: dict[str, int]
    tensor_count: int
    total_bytes: int
    architectures: JSONValue  # config.json's, as written there


class AdapterInfo(TypedDict):
    """An adapter's record: its method and the PEFT config fields that shape it, its stored files' sizes."""

    method: str
    r: int
    lora_alpha: float
    use_rslora: bool
    fan_in_fan_out: bool
    target_modules: JSONValue  # adapter_config.json's: a list of names or a pattern
    modules: int
    tensor_count: int
    named_base: str | None
    files: dict[str, int]


class Materialization(TypedDict):
    """Where the merged weights of an artifact were written (None: only their hash was computed)."""

    weights_hash: str
    path: str | None
    created_at: str


class Recipe(TypedDict, total=False):
    """How an adapter was trained, as given at registration (``operations.RECIPE_FIELDS`` checked); keys
    beyond these are kept as given."""

    corpus_hash: str
    seed: int
    rank: int
    epochs: float
    lr: float
    effective_batch: int
    context: int


class NodeRecord(TypedDict):
    """``nodes/<id>.json``: one stored artifact, a base (``model``) or an adapter (``adapter``, with the
    folder it came from, and for DoRA the evidence of its parent), with its merges' weights."""

    id: str
    kind: Literal["model", "adapter"]
    parent: NotRequired[str | None]
    registered_at: str
    recipe: NotRequired[Recipe | None]
    model: NotRequired[ModelInfo]
    source: NotRequired[str]
    adapter: NotRequired[AdapterInfo]
    evidence: NotRequired[dict[str, object] | None]
    materializations: NotRequired[list[Materialization]]


def default_store_root() -> Path:
    """``$PDBGYM_HOME/adapters``; PDBGYM_HOME defaults to ~/.pdbgym."""
    return pdbgym_home() / "adapters"


@dataclass(frozen=True)
class ChainLayer:
    """One layer of a lineage chain; ``record`` is None when the layer is not in the store."""

    node_id: str
    record: NodeRecord | None
    problem: str | None  # why this layer cannot be used, or None


@dataclass(frozen=True)
class Lineage:
    """A chain ordered base first, ending at the requested artifact."""

    layers: list[ChainLayer]

    @property
    def servable(self) -> bool:
        return all(layer.problem is None for layer in self.layers)

    @property
    def problems(self) -> list[str]:
        return [layer.problem for layer in self.layers if layer.problem]


class Store:
    """A store rooted at ``root``; every mutation takes an exclusive lock and writes atomically."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else default_store_root()

    # ---- paths and locking
    def node_path(self, node_id: str) -> Path:
        return self.root / "nodes" / f"{node_id}.json"

    def object_dir(self, node_id: str) -> Path:
        return self.root / "objects" / node_id

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # ---- reading
    def names(self) -> dict[str, str]:
        path = self.root / "names.json"
        return cast(dict[str, str], read_json(path, "store name table")) if path.is_file() else {}

    def has(self, node_id: str) -> bool:
        return self.node_path(node_id).is_file()

    def get(self, node_id: str) -> NodeRecord:
        if not self.has(node_id):
            raise AdapterError(f"no artifact {node_id[:12]} in the store at {self.root}.")
        return cast(NodeRecord, read_json(self.node_path(node_id), f"store record {node_id[:12]}"))

    def all_nodes(self) -> list[NodeRecord]:
        folder = self.root / "nodes"
        if not folder.is_dir():
            return []
        return [cast(NodeRecord, read_json(path, "store record")) for path in sorted(folder.glob("*.json"))]

    def resolve(self, ref: str) -> str:
        """A name, a full hash or a unique hash prefix (>= 6 hex digits) -> the id of a stored artifact."""
        names = self.names()
        if ref in names:
            return names[ref]
        lowered = ref.lower()
        if re.fullmatch(r"[0-9a-f]+", lowered) and len(lowered) >= _MIN_PREFIX:
            matches = sorted({n["id"] for n in self.all_nodes() if n["id"].startswith(lowered)})
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                listed = ", ".join(m[:12] for m in matches)
                raise AdapterError(f"hash prefix {ref!r} is ambiguous ({listed}); give more digits.")
        known = ", ".join(sorted(names)) or "none"
        raise AdapterError(
            f"{ref!r} is neither a name nor a hash in the store at {self.root} (names: {known}). "
            "Run `pdbgym adapters list` to see what is stored, or register it first."
        )

    def find_by_weights(self, weights_hash: str) -> list[str]:
        """Ids of artifacts whose (merged) weights are exactly ``weights_hash``."""
        found = []
        for node in self.all_nodes():
            hashes = {m["weights_hash"] for m in node.get("materializations", [])}
            if node["id"] == weights_hash and node["kind"] == "model":
                hashes.add(node["id"])
            if weights_hash in hashes:
                found.append(node["id"])
        return found

    def label(self, node_id: str) -> str:
        """``name (abc123def456)`` for display."""
        names = [name for name, target in self.names().items() if target == node_id]
        short = node_id[:12]
        return f"{names[0]} ({short})" if names else short

    # ---- lineage
    def lineage(self, node_id: str) -> Lineage:
        """Walk parent links from ``node_id`` down to a root and report each layer's usability."""
        layers: list[ChainLayer] = []
        seen: set[str] = set()
        current: str | None = node_id
        child: str | None = None
        while current is not None:
            if current in seen:
                raise LineageError(f"the store at {self.root} has a parent cycle through {current[:12]}.")
            seen.add(current)
            if not self.has(current):
                why = (f"layer {current[:12]} is not in the store: {self.label(child) if child else 'it'} was trained "
                       "against it. Register it with `pdbgym adapters register PATH --parent REF`; if it is lost, "
                       "nothing above it can be served again (see `pdbgym adapters accept`).")
                layers.append(ChainLayer(current, None, why))
                break
            record = self.get(current)
            layers.append(ChainLayer(current, record, self._layer_problem(record)))
            child, current = current, record.get("parent")
        return Lineage(list(reversed(layers)))

    def _layer_problem(self, record: NodeRecord) -> str | None:
        if record["kind"] == "model":
            path = Path(record["model"]["path"])
            files = record["model"]["files"]
            missing = [name for name, size in files.items()
                       if not (path / name).is_file() or (path / name).stat().st_size != size]
            if missing:
                return (f"base {self.label(record['id'])} is referenced at {path}, but {', '.join(missing)} is "
                        "missing or changed there. Restore the folder, or register the model again.")
            return None
        folder = self.object_dir(record["id"])
        for name, size in record["adapter"]["files"].items():
            if not (folder / name).is_file() or (folder / name).stat().st_size != size:
                return f"stored files of {self.label(record['id'])} under {folder} are missing or changed ({name})."
        return None

    def parent_conflict(self, node_id: str, parent: str | None, source: str) -> LineageError | None:
        """The refusal when ``node_id`` is stored with a parent other than ``parent`` (an adapter is trained
        against exactly one), or None; ``source`` names the folder being registered."""
        if not self.has(node_id):
            return None
        stored = self.get(node_id).get("parent")
        if stored == parent:
            return None
        return LineageError(f"{source} is already registered as {self.label(node_id)} with parent "
                            f"{str(stored)[:12]}; an adapter is trained against exactly one parent.")

    # ---- writing
    def put_node(self, record: NodeRecord, names: list[str]) -> None:
        """Write (or update) one record and point ``names`` at it; a name already taken by another id is refused.

        The parent is checked again under the lock: of two processes registering one adapter with different
        parents at the same moment, the second to take the lock is refused, as it would be one after the other.
        """
        with self.locked():
            conflict = self.parent_conflict(record["id"], record.get("parent"), record.get("source", record["id"][:12]))
            if conflict is not None:
                raise conflict
            table = self.names()
            for name in names:
                _check_name(name)
                if table.get(name, record["id"]) != record["id"]:
                    raise AdapterError(f"name {name!r} already refers to {table[name][:12]}; choose another name.")
            write_json_atomic(self.node_path(record["id"]), record, indent=2, sort_keys=True)
            if names:
                table.update({name: record["id"] for name in names})
                write_json_atomic(self.root / "names.json", table, indent=2, sort_keys=True)

    def copy_adapter_files(self, node_id: str, source: Path, file_names: list[str]) -> dict[str, int]:
        """Copy an adapter's files into objects/<id>/ (staged, then renamed); returns name -> size."""
        target = self.object_dir(node_id)
        if not target.is_dir():
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{node_id[:12]}.", dir=target.parent))
            for name in file_names:
                shutil.copy2(source / name, staging / name)
            try:
                os.rename(staging, target)
            except OSError:  # another process stored the same content first: identical by hash
                shutil.rmtree(staging, ignore_errors=True)
        return {name: (target / name).stat().st_size for name in file_names}

    def add_materialization(self, node_id: str, weights_hash: str, path: Path | None) -> None:
        """Record that ``node_id``'s merged weights hash to ``weights_hash`` (written at ``path``, or computed only)."""
        where = str(path) if path is not None else None
        with self.locked():
            record = self.get(node_id)
            entries = [m for m in record.get("materializations", [])
                       if (m["path"], m["weights_hash"]) != (where, weights_hash) and (where is None or m["path"] != where)]
            entries.append({"weights_hash": weights_hash, "path": where, "created_at": now_utc()})
            record["materializations"] = entries
            write_json_atomic(self.node_path(node_id), record, indent=2, sort_keys=True)


def is_full_hash(text: str) -> bool:
    return bool(_FULL_HASH.match(text.lower()))


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or is_full_hash(name):
        raise AdapterError(f"name {name!r} is not usable: use letters, digits, '-', '_' or '.', not a path or hash.")


def now_utc() -> str:
    """Current UTC time as ISO 8601 (seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
