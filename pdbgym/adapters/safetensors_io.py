"""Streaming safetensors I/O: validated headers, one-tensor reads, and a writer that never holds a shard.

The safetensors layout is an 8-byte little-endian header length, a JSON header mapping each tensor name to
``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the end of the header), then
the raw bytes. Reading and writing one tensor at a time keeps peak memory at the largest tensor instead
of the largest shard, which is what makes the shard-wise merge cheap.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypedDict, cast

from pdbgym.adapters.errors import CorruptArtifactError
from pdbgym.fileio import JSONValue

if TYPE_CHECKING:
    import torch
    from _typeshed import ReadableBuffer

# Bytes per element for each safetensors dtype tag.
DTYPE_ITEMSIZE: dict[str, int] = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8,
}
_MAX_HEADER_BYTES = 100 * 1024 * 1024
_HASH_CHUNK_BYTES = 16 * 1024 * 1024


class SafetensorsEntry(TypedDict):
    """A tensor's entry in a safetensors header: dtype tag, shape and byte offsets in the data section."""

    dtype: str
    shape: list[int]
    data_offsets: list[int]


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file; ``begin``/``end`` are absolute byte offsets in the file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsHeader:
    """The parsed, validated header of one safetensors file (tensors in on-disk order)."""

    path: Path
    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]


def _corrupt(path: Path, what: str) -> CorruptArtifactError:
    return CorruptArtifactError(
        f"{path}: {what}. The file is truncated or not safetensors; re-copy or re-save it "
        "(e.g. save_pretrained(..., safe_serialization=True))."
    )


def read_header(path: Path) -> SafetensorsHeader:
    """Parse and validate the header of ``path``; every tensor's bytes must lie inside the file."""
    path = Path(path)
    if not path.is_file():
        raise CorruptArtifactError(f"{path}: file not found.")
    file_size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise _corrupt(path, f"only {file_size} bytes, shorter than the 8-byte header length")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > min(_MAX_HEADER_BYTES, file_size - 8):
            raise _corrupt(path, f"header length {header_len} exceeds the file size {file_size}")
        try:
            raw = json.loads(handle.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _corrupt(path, f"header is not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise _corrupt(path, "header is not a JSON object")
    data_start = 8 + header_len
    metadata = raw.pop("__metadata__", None) or {}
    tensors: dict[str, TensorEntry] = {}
    for name, spec in raw.items():
        tensors[name] = _parse_entry(path, name, spec, data_start, file_size)
    return SafetensorsHeader(path=path, tensors=tensors, metadata=dict(metadata))


def _parse_entry(path: Path, name: str, spec: JSONValue, data_start: int, file_size: int) -> TensorEntry:
    entry = cast(SafetensorsEntry, spec)  # as read: a malformed one fails the unpacking below, and is refused
    try:
        dtype, shape, (begin, end) = entry["dtype"], tuple(int(d) for d in entry["shape"]), entry["data_offsets"]
    except (KeyError, TypeError, ValueError) as exc:
        raise _corrupt(path, f"tensor {name!r} has a malformed header entry") from exc
    if dtype not in DTYPE_ITEMSIZE:
        raise _corrupt(path, f"tensor {name!r} has unknown dtype {dtype!r}")
    expected = DTYPE_ITEMSIZE[dtype]
    for dim in shape:
        expected *= dim
    if end - begin != expected or begin < 0:
        raise _corrupt(path, f"tensor {name!r} spans {end - begin} bytes but its shape needs {expected}")
    if data_start + end > file_size:
        raise _corrupt(path, f"tensor {name!r} ends at byte {data_start + end} past the end of file ({file_size})")
    return TensorEntry(name, dtype, shape, data_start + begin, data_start + end)


def torch_dtype(tag: str) -> torch.dtype:
    """The torch dtype for a safetensors dtype tag."""
    import torch  # optional: torch (pdbgym[hf])

    table = {
        "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
        "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
        "BOOL": torch.bool,
    }
    if tag not in table:
        raise CorruptArtifactError(f"dtype {tag} is not supported by the merger (supported: {sorted(table)}).")
    return table[tag]


def dtype_tag(dtype: torch.dtype) -> str:
    """The safetensors dtype tag for a torch dtype."""
    import torch  # optional: torch (pdbgym[hf])

    table = {
        torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
        torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
        torch.bool: "BOOL",
    }
    return table[dtype]


def read_tensor(handle: IO[bytes], entry: TensorEntry) -> torch.Tensor:
    """Read one tensor straight into a fresh torch buffer (no mmap, no intermediate copy)."""
    import torch  # optional: torch (pdbgym[hf])

    tensor = torch.empty(entry.shape, dtype=torch_dtype(entry.dtype))
    if entry.nbytes:
        handle.seek(entry.begin)
        view = memoryview(tensor.reshape(-1).view(torch.uint8).numpy())
        if handle.readinto(view) != entry.nbytes:
            raise _corrupt(Path(handle.name), f"tensor {entry.name!r} could not be read in full")
    return tensor


def iter_chunks(handle: IO[bytes], entry: TensorEntry) -> Iterator[bytes]:
    """Yield the raw bytes of one tensor in chunks of at most 16 MiB."""
    handle.seek(entry.begin)
    remaining = entry.nbytes
    while remaining:
        chunk = handle.read(min(remaining, _HASH_CHUNK_BYTES))
        if not chunk:
            raise _corrupt(Path(handle.name), f"tensor {entry.name!r} ends early")
        remaining -= len(chunk)
        yield chunk


def tensor_digest(name: str, dtype: str, shape: tuple[int, ...], chunks: Iterator[ReadableBuffer]) -> str:
    """sha256 of a tensor's name, dtype, shape and bytes (``chunks``: bytes-like pieces in order)."""
    digest = hashlib.sha256(f"{name}\0{dtype}\0{list(shape)}\0".encode())
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def digest_torch_tensor(name: str, tensor: torch.Tensor) -> str:
    """The :func:`tensor_digest` of an in-memory tensor, as it will be written."""
    import torch  # optional: torch (pdbgym[hf])

    # hashlib reads the numpy buffer in place: no copy of the tensor is made.
    raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy()
    return tensor_digest(name, dtype_tag(tensor.dtype), tuple(tensor.shape), iter([raw]))


class StreamingWriter:
    """Writes a safetensors file tensor by tensor, in a fixed order declared up front.

    The header needs every offset, so names, dtypes and shapes are declared at construction; bytes then
    follow in that order. Output goes to ``<path>.tmp`` and is renamed into place by :meth:`close`.
    """

    def __init__(self, path: Path, layout: list[tuple[str, str, tuple[int, ...]]], metadata: dict[str, str]):
        self.path = Path(path)
        self._tmp = self.path.with_name(self.path.name + ".tmp")
        header: dict[str, dict[str, str] | SafetensorsEntry] = {"__metadata__": metadata} if metadata else {}
        offset = 0
        self._expected: list[tuple[str, int]] = []
        for name, dtype, shape in layout:
            size = DTYPE_ITEMSIZE[dtype]
            for dim in shape:
                size *= dim
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
            self._expected.append((name, size))
            offset += size
        encoded = json.dumps(header, separators=(",", ":")).encode()
        encoded += b" " * (-len(encoded) % 8)  # the format aligns the data section to 8 bytes
        self._handle = open(self._tmp, "wb")
        self._handle.write(struct.pack("<Q", len(encoded)) + encoded)
        self._next = 0

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """Append the next tensor; it must be the one the layout declared next, with the same size."""
        import torch  # optional: torch (pdbgym[hf])

        expected_name, expected_size = self._expected[self._next]
        raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy()
        if name != expected_name or raw.nbytes != expected_size:
            raise ValueError(f"writer expected {expected_name} ({expected_size} B), got {name} ({raw.nbytes} B)")
        self._handle.write(raw.data)
        self._next += 1

    def close(self) -> None:
        """Flush, fsync and atomically move the finished file into place."""
        if self._next != len(self._expected):
            self.abort()
            raise ValueError(f"{self.path}: only {self._next} of {len(self._expected)} tensors were written")
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drop the partial file."""
        self._handle.close()
        self._tmp.unlink(missing_ok=True)
