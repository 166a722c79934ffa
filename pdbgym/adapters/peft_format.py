"""Reading PEFT LoRA/DoRA adapter folders: config, per-module tensors, scaling, and a content hash.

PEFT saves ``base_model.model.<module>.lora_A.weight`` (r x in), ``...lora_B.weight`` (out x r) and, for
DoRA, ``...lora_magnitude_vector`` (out,). The module's weight in the model is ``<module>.weight``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, cast

from pdbgym.adapters.errors import CorruptArtifactError
from pdbgym.adapters.files import read_json
from pdbgym.adapters.fingerprint import combine_digests
from pdbgym.adapters.safetensors_io import (
    SafetensorsHeader,
    TensorEntry,
    iter_chunks,
    read_header,
    tensor_digest,
)
from pdbgym.fileio import JSONValue

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_PREFIX = "base_model.model."
_KEY = re.compile(r"^(?P<module>.+)\.(?P<part>lora_A\.weight|lora_B\.weight|lora_magnitude_vector(?:\.weight)?)$")
# Config fields that change the merged weights; everything else (paths, versions) is not identity.
_MATH_FIELDS = ("peft_type", "r", "lora_alpha", "use_rslora", "use_dora", "fan_in_fan_out",
                "rank_pattern", "alpha_pattern", "target_modules")


@dataclass(frozen=True)
class ModuleDelta:
    """Where one adapted module's tensors live and how to scale them."""

    module: str  # model module path, e.g. "model.layers.0.self_attn.q_proj"
    lora_a: TensorEntry  # (r, in_features)
    lora_b: TensorEntry  # (out_features, r)
    magnitude: TensorEntry | None  # (out_features,) for DoRA, else None
    scaling: float  # lora_alpha / r, or lora_alpha / sqrt(r) with rslora

    @property
    def weight_name(self) -> str:
        return f"{self.module}.weight"


class PeftConfig(TypedDict, total=False):
    """The fields of PEFT's ``adapter_config.json`` the merger reads (PEFT writes more; they are kept as written).
    ``_check_config`` makes sure of ``peft_type`` LORA and numeric ``r`` and ``lora_alpha``."""

    peft_type: str
    r: int
    lora_alpha: float
    use_dora: bool
    use_rslora: bool
    fan_in_fan_out: bool
    base_model_name_or_path: str | None
    target_modules: JSONValue  # a list of module names or one regular expression
    rank_pattern: dict[str, int]
    alpha_pattern: dict[str, float]
    lora_bias: bool
    layer_replication: JSONValue


@dataclass(frozen=True)
class AdapterFolder:
    """A validated PEFT LoRA/DoRA adapter folder."""

    path: Path
    config: PeftConfig
    header: SafetensorsHeader
    modules: dict[str, ModuleDelta]  # keyed by the model weight name "<module>.weight"

    @property
    def use_dora(self) -> bool:
        return bool(self.config.get("use_dora"))

    @property
    def fan_in_fan_out(self) -> bool:
        return bool(self.config.get("fan_in_fan_out"))

    @property
    def method(self) -> str:
        return "dora" if self.use_dora else "lora"

    @property
    def named_base(self) -> str | None:
        return self.config.get("base_model_name_or_path")


def is_adapter_folder(path: Path) -> bool:
    """True when ``path`` looks like a PEFT adapter folder (has adapter_config.json)."""
    return (Path(path) / CONFIG_FILE).is_file()


def _pattern_value(patterns: Mapping[str, float], module: str, default: float) -> float:
    # PEFT's rule: a pattern key matches a module whose name ends with it on a dot boundary.
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def module_scaling(config: PeftConfig, module: str) -> float:
    """The LoRA scale for ``module``: alpha / r, or alpha / sqrt(r) under rslora (rank/alpha patterns apply)."""
    rank = _pattern_value(config.get("rank_pattern") or {}, module, config["r"])
    alpha = _pattern_value(config.get("alpha_pattern") or {}, module, config["lora_alpha"])
    return float(alpha) / (float(rank) ** 0.5 if config.get("use_rslora") else float(rank))


def _check_config(path: Path, config: JSONValue) -> PeftConfig:
    where = path / CONFIG_FILE
    if not isinstance(config, dict):
        raise CorruptArtifactError(f"{where}: not a JSON object.")
    if config.get("peft_type") != "LORA":
        raise CorruptArtifactError(f"{where}: peft_type is {config.get('peft_type')!r}; only LORA (and DoRA) adapters merge.")
    for field in ("r", "lora_alpha"):
        if not isinstance(config.get(field), int | float):
            raise CorruptArtifactError(f"{where}: field {field!r} is missing or not a number.")
    if config.get("lora_bias"):
        raise CorruptArtifactError(f"{where}: lora_bias=True adapters are not supported by the merger.")
    if config.get("layer_replication"):
        raise CorruptArtifactError(f"{where}: layer_replication adapters are not supported by the merger.")
    return cast(PeftConfig, config)  # a LORA config with numeric r and lora_alpha, as checked


def load_adapter(path: Path) -> AdapterFolder:
    """Open and validate an adapter folder; any unreadable or unsupported part raises with its name."""
    path = Path(path)
    if not path.is_dir():
        raise CorruptArtifactError(f"{path}: not an adapter folder (expected {CONFIG_FILE} and {WEIGHTS_FILE}).")
    config = _check_config(path, read_json(path / CONFIG_FILE, "adapter config"))
    if not (path / WEIGHTS_FILE).is_file():
        hint = " (adapter_model.bin found: re-save with safe_serialization=True)" if (path / "adapter_model.bin").exists() else ""
        raise CorruptArtifactError(f"{path}: {WEIGHTS_FILE} not found{hint}.")
    header = read_header(path / WEIGHTS_FILE)
    parts: dict[str, dict[str, TensorEntry]] = {}
    for name, entry in header.tensors.items():
        match = _KEY.match(name[len(_PREFIX):] if name.startswith(_PREFIX) else "")
        if match is None:
            raise CorruptArtifactError(
                f"{path / WEIGHTS_FILE}: tensor {name!r} is not a LoRA A/B or DoRA magnitude tensor "
                "(modules_to_save, embeddings and trainable tokens are not supported by the merger)."
            )
        parts.setdefault(match["module"], {})[match["part"].split(".")[0]] = entry
    modules = {}
    for module, found in parts.items():
        delta = _module_delta(path, config, module, found)
        modules[delta.weight_name] = delta
    if not modules:
        raise CorruptArtifactError(f"{path / WEIGHTS_FILE}: holds no LoRA tensors.")
    return AdapterFolder(path=path, config=config, header=header, modules=modules)


def _module_delta(path: Path, config: PeftConfig, module: str, found: dict[str, TensorEntry]) -> ModuleDelta:
    if "lora_A" not in found or "lora_B" not in found:
        raise CorruptArtifactError(f"{path / WEIGHTS_FILE}: module {module!r} lacks lora_A or lora_B.")
    lora_a, lora_b = found["lora_A"], found["lora_B"]
    if len(lora_a.shape) != 2 or len(lora_b.shape) != 2 or lora_a.shape[0] != lora_b.shape[1]:
        raise CorruptArtifactError(
            f"{path / WEIGHTS_FILE}: module {module!r} has A {lora_a.shape} and B {lora_b.shape}; "
            "only Linear layers (2-D A and B of matching rank) are supported."
        )
    magnitude = found.get("lora_magnitude_vector")
    if bool(magnitude) != bool(config.get("use_dora")):
        raise CorruptArtifactError(
            f"{path}: module {module!r} {'has' if magnitude else 'lacks'} a DoRA magnitude vector but "
            f"use_dora={config.get('use_dora')} in {CONFIG_FILE}."
        )
    return ModuleDelta(module, lora_a, lora_b, magnitude, module_scaling(config, module))


def adapter_content_hash(adapter: AdapterFolder) -> str:
    """The adapter's identity: sha256 over its tensor digests and the config fields that change the math."""
    digests = {}
    with open(adapter.header.path, "rb") as handle:
        for entry in adapter.header.tensors.values():
            digests[entry.name] = tensor_digest(entry.name, entry.dtype, entry.shape, iter_chunks(handle, entry))
    math_config = {field: adapter.config.get(field) for field in _MATH_FIELDS}
    if isinstance(math_config["target_modules"], list):
        math_config["target_modules"] = sorted(math_config["target_modules"])
    payload = json.dumps({"tensors": combine_digests(digests), "config": math_config}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()
