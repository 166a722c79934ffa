"""Teacher caches on disk: ``<dir>/<dataset>/<instance_id>.pt`` files plus ``<dir>/manifest.json``.

A ``.pt`` file holds one record dict, or a list of record dicts when an instance has several samples
(told apart by ``metadata["_sample_idx"]``). ``manifest.json`` is a JSON list of
``{"dataset", "instance_id", "path"}`` entries, ``path`` relative to the cache folder. Files may also be
``.parquet`` (one row per sample, see ``pdbgym.rollouts.parquet``).

``.pt`` files are pickles, so they are only ever opened with ``torch.load(weights_only=True)``: a file
that needs anything beyond plain containers, scalars, strings and tensors is refused, never executed.
Every write is atomic (temporary file + rename), and ``append_records`` can be re-run after a crash.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from pdbgym.fileio import atomic_target, write_json_atomic
from pdbgym.rollouts.compare import record_differences
from pdbgym.rollouts.optional import import_optional
from pdbgym.rollouts.parquet import read_parquet, write_parquet
from pdbgym.rollouts.record import CacheFormatError, RolloutRecord

CACHE_DIR_ENV = "KL_EVAL_TEACHER_CACHE_DIR"
MANIFEST_NAME = "manifest.json"
CACHE_FORMATS = ("pt", "parquet")
FileProgress = Callable[[int, int], None]


@dataclass(frozen=True)
class ManifestEntry:
    """One manifest line: the file (relative to the cache folder) holding one instance's samples."""

    dataset: str
    instance_id: str
    path: str

    def to_dict(self) -> dict[str, str]:
        return {"dataset": self.dataset, "instance_id": self.instance_id, "path": self.path}


def default_cache_dir() -> Path:
    """The cache folder named by ``$KL_EVAL_TEACHER_CACHE_DIR``."""
    value = os.environ.get(CACHE_DIR_ENV, "").strip()
    if not value:
        raise CacheFormatError(
            f"no cache folder given and ${CACHE_DIR_ENV} is not set: pass the folder explicitly or "
            f"`export {CACHE_DIR_ENV}=/path/to/teacher_cache`"
        )
    return Path(value)


def resolve_cache_dir(cache_dir: Path | str | None) -> Path:
    """A cache folder from a folder, a path to its ``manifest.json``, or None (the environment)."""
    folder = default_cache_dir() if cache_dir is None else Path(cache_dir)
    if folder.name == MANIFEST_NAME and folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise CacheFormatError(f"cache folder {folder} does not exist (or is not a folder)")
    return folder


def resolve_cache_source(cache: Path | str | None) -> Path:
    """A single-file Parquet cache (what ``cache convert X.parquet`` writes) as it is, else ``resolve_cache_dir``."""
    if cache is not None and Path(cache).suffix == ".parquet" and Path(cache).is_file():
        return Path(cache)
    return resolve_cache_dir(cache)


def _path_component(name: str, what: str) -> str:
    """A file-name-safe, collision-free spelling of an instance id or dataset name."""
    if name in ("", ".", ".."):
        raise CacheFormatError(f"{what} {name!r} cannot name a file; use a non-empty, ordinary name")
    return quote(name, safe="-_.+=@,")


def instance_relpath(dataset: str, instance_id: str, fmt: str = "pt") -> str:
    """Where an instance's file lives inside the cache folder (POSIX separators)."""
    if fmt not in CACHE_FORMATS:
        raise CacheFormatError(f"unknown cache file format {fmt!r}; use one of {CACHE_FORMATS}")
    return f"{_path_component(dataset, 'dataset')}/{_path_component(instance_id, 'instance_id')}.{fmt}"


def read_manifest(cache_dir: Path) -> list[ManifestEntry]:
    """Entries of ``<cache_dir>/manifest.json`` (a JSON list, or an object with an ``entries`` list)."""
    manifest_path = Path(cache_dir) / MANIFEST_NAME
    if not manifest_path.is_file():
        raise CacheFormatError(
            f"{manifest_path} is missing: a teacher cache needs a manifest listing its files; if the folder "
            f"holds a cache's instance files, rebuild it with `pdbgym cache repair {Path(cache_dir)}`, else "
            "point at the cache folder that `pdbgym cache build` wrote"
        )
    try:
        data = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CacheFormatError(f"{manifest_path} is not valid JSON: {exc}; rebuild it from the cache's files "
                               f"with `pdbgym cache repair {cache_dir}`") from exc
    if isinstance(data, dict):
        data = data.get("entries")
    if not isinstance(data, list):
        raise CacheFormatError(f"{manifest_path} must hold a JSON list of entries")
    entries = []
    for index, item in enumerate(data):
        if not isinstance(item, dict) or not all(
            isinstance(item.get(key), str) for key in ("dataset", "instance_id", "path")
        ):
            raise CacheFormatError(
                f"{manifest_path} entry {index} must have string fields dataset, instance_id, path; "
                f"got {item!r}"
            )
        _check_inside(Path(cache_dir), item["path"], f"{manifest_path} entry {index}")
        entries.append(ManifestEntry(item["dataset"], item["instance_id"], item["path"]))
    return entries


def _check_inside(cache_dir: Path, relpath: str, where: str) -> None:
    """Refuse an entry path that leaves the cache folder: absolute, with a ``..`` component, or through a
    symlink pointing out (every command reads manifests through :func:`read_manifest`, so none follows one)."""
    parts = PurePosixPath(relpath).parts
    if not relpath or PurePosixPath(relpath).is_absolute() or Path(relpath).is_absolute() or ".." in parts:
        raise CacheFormatError(f"{where}: path {relpath!r} is not inside the cache folder; manifest paths are "
                               "relative to it, without '..' (rewrite the manifest or rebuild the cache)")
    folder = cache_dir.resolve()
    if not (folder / relpath).resolve().is_relative_to(folder):
        raise CacheFormatError(f"{where}: path {relpath!r} leads out of the cache folder {folder} through a "
                               "symlink; copy the file into the cache instead")


def write_manifest(cache_dir: Path, entries: Iterable[ManifestEntry]) -> Path:
    """Write ``manifest.json`` atomically; returns its path."""
    manifest_path = Path(cache_dir) / MANIFEST_NAME
    write_json_atomic(manifest_path, [entry.to_dict() for entry in entries])
    return manifest_path


def repair_manifest(cache_dir: Path | str) -> tuple[list[ManifestEntry], Path | None]:
    """Rebuild ``manifest.json`` from the instance files in ``cache_dir`` (a manifest that is missing,
    cut short or corrupted). Each ``.pt``/``.parquet`` file is listed under the dataset and instance id
    its records hold; the unreadable manifest is kept beside as ``manifest.json.bad`` (returned). A file
    that cannot be read, or mixes instances, is refused by name: nothing is rewritten then."""
    folder = Path(cache_dir)
    if not folder.is_dir():
        raise CacheFormatError(f"cache folder {folder} does not exist (or is not a folder)")
    entries = []
    for path in sorted(p for p in folder.rglob("*") if p.suffix in (".pt", ".parquet") and p.is_file()):
        records = load_file_records(path)
        owners = {(r.dataset, r.instance_id) for r in records}
        if len(owners) != 1:
            raise CacheFormatError(f"{path}: holds {len(owners)} instances; an instance file holds exactly one")
        (dataset, instance_id), = owners
        entries.append(ManifestEntry(dataset, instance_id, path.relative_to(folder).as_posix()))
    manifest = folder / MANIFEST_NAME
    kept = None
    if manifest.is_file():
        kept = manifest.with_name(MANIFEST_NAME + ".bad")
        os.replace(manifest, kept)
    write_manifest(folder, entries)
    return entries, kept


def entry_file(cache_dir: Path, entry: ManifestEntry) -> Path:
    """The file an entry points at, inside the cache folder (:func:`read_manifest` refused any other)."""
    return Path(cache_dir) / entry.path


def load_file_dicts(path: Path) -> Sequence[Mapping[str, object]]:
    """The raw record dicts in one cache file (``.pt`` or ``.parquet``), without field checks: a ``.pt``
    file's values are whatever it holds (``RolloutRecord.from_dict`` checks them)."""
    path = Path(path)
    if not path.is_file():
        raise CacheFormatError(f"cache file {path} does not exist")
    if path.suffix == ".parquet":
        return [record.to_dict() for record in read_parquet(path)]
    if path.suffix != ".pt":
        raise CacheFormatError(f"cache file {path} must end in .pt or .parquet")
    return _load_pt(path)


def _load_pt(path: Path) -> list[dict[str, object]]:
    torch = import_optional("torch", "hf", "reading .pt cache files")

    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CacheFormatError(
            f"{path} was refused by torch.load(weights_only=True): {_unpickler_reason(exc)}. Either it is "
            "corrupt or it holds objects beyond plain dicts/lists/str/int/float/tensors; pdbgym never "
            "unpickles arbitrary objects, so re-save the record as such a plain dict"
        ) from exc
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise CacheFormatError(f"{path} is not a readable torch file: {exc}") from exc
    if isinstance(data, dict):
        return [data]
    if isinstance(data, (list, tuple)) and all(isinstance(item, dict) for item in data):
        return list(data)
    raise CacheFormatError(f"{path} must hold a record dict or a list of record dicts, got {type(data).__name__}")


def _unpickler_reason(exc: Exception) -> str:
    """The one informative line of torch's long weights_only error (e.g. 'Unsupported global: ...')."""
    text = str(exc)
    marker = "WeightsUnpickler error:"
    if marker in text:
        after = text.split(marker, 1)[1].strip()
        return after.split(". Please use", 1)[0].splitlines()[0].strip() or "unsupported content"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def load_file_records(path: Path) -> list[RolloutRecord]:
    """The records in one cache file, with types checked (``CacheFormatError`` names file and field)."""
    records = []
    for data in load_file_dicts(path):
        try:
            records.append(RolloutRecord.from_dict(data))
        except CacheFormatError as exc:
            raise CacheFormatError(f"{path}: {exc}") from exc
    return records


def iter_cache(cache_dir: Path | str | None = None, *, on_file: FileProgress | None = None
               ) -> Iterator[RolloutRecord]:
    """Records of a cache in manifest order, one file in memory at a time.

    ``cache_dir`` may be the folder, its ``manifest.json``, or None for ``$KL_EVAL_TEACHER_CACHE_DIR``.
    A file whose records name another dataset or instance than its manifest entry is an error.
    ``on_file(files_started, files_total)`` is called as each file is opened (for progress bars).
    """
    folder = resolve_cache_dir(cache_dir)
    entries = read_manifest(folder)
    for index, entry in enumerate(entries):
        if on_file is not None:
            on_file(index, len(entries))
        path = entry_file(folder, entry)
        for record in load_file_records(path):
            if (record.dataset, record.instance_id) != (entry.dataset, entry.instance_id):
                raise CacheFormatError(
                    f"{path}: holds {record.label} but the manifest lists it as "
                    f"{entry.dataset}/{entry.instance_id}; fix the manifest or the file"
                )
            yield record


def read_cache(cache_dir: Path | str | None = None) -> list[RolloutRecord]:
    """All records of a cache (see ``iter_cache``); None reads ``$KL_EVAL_TEACHER_CACHE_DIR``."""
    return list(iter_cache(cache_dir))


def _group_by_instance(records: Iterable[RolloutRecord]) -> dict[tuple[str, str], list[RolloutRecord]]:
    groups: dict[tuple[str, str], list[RolloutRecord]] = {}
    for record in records:
        if not isinstance(record, RolloutRecord):
            raise CacheFormatError(f"expected RolloutRecord objects, got {type(record).__name__}")
        groups.setdefault((record.dataset, record.instance_id), []).append(record)
    return groups


def _with_sample_idx(record: RolloutRecord, sample_idx: int) -> RolloutRecord:
    clone = RolloutRecord.from_dict(record.to_dict())
    clone.metadata["_sample_idx"] = sample_idx
    return clone


def _explicit_sample_idx(record: RolloutRecord) -> int | None:
    value = record.metadata.get("_sample_idx")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CacheFormatError(f"{record.label}: metadata['_sample_idx'] must be an int >= 0, got {value!r}")
    return value


def number_samples(samples: list[RolloutRecord]) -> list[RolloutRecord]:
    """One instance's samples, each with an explicit ``_sample_idx`` when there are several.

    Explicit indices are kept; samples without one get the smallest unused index, in order. Two
    samples claiming one index is a ``CacheFormatError``. A lone sample is returned unchanged.
    """
    if len(samples) == 1:
        return list(samples)
    explicit = [_explicit_sample_idx(s) for s in samples]
    seen: set[int] = set()
    for sample, index in zip(samples, explicit, strict=True):
        if index is not None and index in seen:
            raise CacheFormatError(f"{sample.label}: two samples share _sample_idx {index}; make them unique")
        if index is not None:
            seen.add(index)
    numbered = []
    next_free = 0
    for sample, index in zip(samples, explicit, strict=True):
        if index is None:
            while next_free in seen:
                next_free += 1
            index = next_free
            seen.add(index)
        numbered.append(sample if sample.metadata.get("_sample_idx") == index else _with_sample_idx(sample, index))
    return sorted(numbered, key=lambda s: s.sample_idx)


def merge_samples(existing: list[RolloutRecord], new: Iterable[RolloutRecord]) -> list[RolloutRecord]:
    """One instance's samples after adding ``new`` to ``existing``; idempotent, so re-runs are safe.

    A new sample whose ``_sample_idx`` is already stored is skipped when identical and refused
    (``CacheFormatError``) when different. A new sample without ``_sample_idx`` is skipped when an
    identical sample is stored, else it gets the smallest unused index; so give samples explicit
    indices when two samples of one instance may be identical (greedy decoding).
    """
    merged = number_samples(existing) if existing else []
    for record in new:
        wanted = _explicit_sample_idx(record)
        if wanted is not None:
            clash = [r for r in merged if r.sample_idx == wanted]
            if clash and record_differences(clash[0], record, ignore_sample_idx=True):
                raise CacheFormatError(
                    f"{record.label}: a different sample with _sample_idx {wanted} is already stored; "
                    "give the new sample another _sample_idx"
                )
            if clash:
                continue
        elif any(not record_differences(r, record, ignore_sample_idx=True) for r in merged):
            continue
        merged = number_samples([*merged, record])
    return merged


def save_instance_file(path: Path, samples: list[RolloutRecord]) -> None:
    """Write one instance's samples atomically: a dict for one sample, a list for several."""
    path = Path(path)
    if path.suffix == ".parquet":
        write_parquet(path, samples)
        return
    torch = import_optional("torch", "hf", "writing .pt cache files")
    payload = samples[0].to_dict() if len(samples) == 1 else [s.to_dict() for s in samples]
    with atomic_target(path) as tmp:
        torch.save(payload, tmp)


def write_cache(
    cache_dir: Path | str, records: Iterable[RolloutRecord], *, fmt: str = "pt", overwrite: bool = False
) -> Path:
    """Write a new cache folder (one file per instance + ``manifest.json``); returns the folder.

    Several records of one (dataset, instance_id) become one file of samples; samples without
    ``metadata["_sample_idx"]`` are numbered in order. An existing cache is refused unless
    ``overwrite`` (then files the old manifest listed and the new one does not are removed).
    """
    folder = Path(cache_dir)
    if fmt not in CACHE_FORMATS:
        raise CacheFormatError(f"unknown cache file format {fmt!r}; use one of {CACHE_FORMATS}")
    old_entries: list[ManifestEntry] = []
    if (folder / MANIFEST_NAME).exists():
        if not overwrite:
            raise CacheFormatError(
                f"{folder} already holds a cache; pass overwrite=True to replace it, or add samples "
                "with append_records"
            )
        old_entries = read_manifest(folder)
    entries = []
    for (dataset, instance_id), group in _group_by_instance(records).items():
        samples = number_samples(group)
        entry = ManifestEntry(dataset, instance_id, instance_relpath(dataset, instance_id, fmt))
        save_instance_file(entry_file(folder, entry), samples)
        entries.append(entry)
    folder.mkdir(parents=True, exist_ok=True)
    write_manifest(folder, entries)
    kept = {entry_file(folder, entry).resolve() for entry in entries}
    for entry in old_entries:
        stale = entry_file(folder, entry)
        if stale.resolve() not in kept:
            stale.unlink(missing_ok=True)
    return folder


def append_records(cache_dir: Path | str, records: Iterable[RolloutRecord], *, fmt: str | None = None) -> None:
    """Add samples to a cache (created if missing), updating file and manifest per instance.

    Resume-safe: after a crash, re-running the same call ends in the same cache as an uninterrupted
    run, because an instance's file on disk is merged (``merge_samples``) even when the manifest does
    not list it yet. ``fmt`` (for new instances) defaults to the format of the cache's first file.
    """
    folder = Path(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    entries = read_manifest(folder) if (folder / MANIFEST_NAME).exists() else []
    if fmt is None:
        fmt = Path(entries[0].path).suffix.lstrip(".") if entries else "pt"
    by_key = {(e.dataset, e.instance_id): e for e in entries}
    for key, group in _group_by_instance(records).items():
        entry = by_key.get(key) or ManifestEntry(key[0], key[1], instance_relpath(key[0], key[1], fmt))
        path = entry_file(folder, entry)
        existing = load_file_records(path) if path.exists() else []
        merged = merge_samples(existing, group)
        if len(merged) != len(existing) or any(
            record_differences(old, new) for old, new in zip(existing, merged, strict=True)
        ):
            save_instance_file(path, merged)
        if key not in by_key:
            by_key[key] = entry
            entries.append(entry)
            write_manifest(folder, entries)
