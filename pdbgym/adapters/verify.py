"""Check a merged folder against PEFT's own stacking: same probe inputs, logits must agree.

Reference: load the base, apply each lower layer with PEFT and ``merge_and_unload`` it, then apply the top
adapter live (unmerged, so PEFT's forward path computes the LoRA/DoRA branch itself). Candidate: the
merged folder loaded plainly. The figure is the relative logit error
    max |logits_merged - logits_stacked| / max |logits_stacked|   (dimensionless, >= 0)
on seeded random token ids, and it must not exceed the tolerance for the weights' dtype.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pdbgym.adapters.errors import AdapterError, LineageError
from pdbgym.adapters.fingerprint import weights_hash
from pdbgym.adapters.merge import MANIFEST_FILE, read_manifest
from pdbgym.fileio import write_json_atomic
from pdbgym.modelload import load_causal_lm
from pdbgym.versions import require

if TYPE_CHECKING:  # annotations only: torch loads with the models compared
    import torch

# Relative logit error allowed per weight dtype: float32 merges differ from PEFT's only by summation order;
# 16-bit weights are rounded once by us and once per layer by PEFT.
TOLERANCE = {"float32": 1e-4, "float64": 1e-8, "bfloat16": 3e-2, "float16": 1e-2}


@dataclass(frozen=True)
class Verification:
    """Result of one merged-vs-stacked comparison."""

    relative_logit_error: float
    max_abs_logit_diff: float
    argmax_agreement: float  # share of probe positions whose top token agrees, in [0, 1]
    tolerance: float
    dtype: str
    probe_shape: list[int]  # [batch, tokens]
    passed: bool


@contextmanager
def _quiet_loading() -> Iterator[None]:
    """Silence transformers' per-load progress bars (they would flood stderr once per layer)."""
    require("transformers")
    from transformers.utils import logging as hf_logging  # optional: transformers (pdbgym[hf])

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def probe_ids(vocab_size: int, batch: int, tokens: int, seed: int) -> torch.Tensor:
    """Seeded random token ids, shape (batch, tokens)."""
    import torch  # optional: torch (pdbgym[hf])

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, tokens), generator=generator)


def stacked_logits(base_path: Path, adapter_dirs: list[Path], input_ids: torch.Tensor) -> torch.Tensor:
    """Logits (batch, tokens, vocab) of PEFT's stack: lower layers merged in turn, the top one live."""
    require("torch", "transformers", "peft")
    import torch  # optional: torch (pdbgym[hf])
    from peft import PeftModel  # optional: peft (pdbgym[train])

    model = load_causal_lm(base_path, "cpu", dtype="auto")
    for position, adapter_dir in enumerate(adapter_dirs):
        model = PeftModel.from_pretrained(model, adapter_dir)
        if position < len(adapter_dirs) - 1:
            model = model.merge_and_unload()
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits.float()
    del model  # frees the weights before the next model loads
    return logits


def plain_logits(model_path: Path, input_ids: torch.Tensor) -> tuple[torch.Tensor, str]:
    """Logits (batch, tokens, vocab) of a plain model folder, and its weights' dtype name."""
    require("torch", "transformers")
    import torch  # optional: torch (pdbgym[hf])

    model = load_causal_lm(model_path, "cpu", dtype="auto")
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits.float()
    del model  # frees the weights before the next model loads
    return logits, dtype


def compare(reference: torch.Tensor, candidate: torch.Tensor, tolerance: float, dtype: str) -> Verification:
    """Relative max error and argmax agreement of two logit tensors of the same shape (pure)."""
    diff = float((candidate - reference).abs().max())
    scale = float(reference.abs().max())
    relative = diff / scale if scale > 0 else diff
    agreement = float((candidate.argmax(-1) == reference.argmax(-1)).float().mean())
    return Verification(relative, diff, agreement, tolerance, dtype, list(reference.shape[:2]),
                        relative <= tolerance)


def verify_folder(folder: Path, batch: int = 2, tokens: int = 16, seed: int = 0, record: bool = True) -> Verification:
    """Rerun the comparison recorded in ``folder``'s manifest; optionally store the result in it."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    base_path = Path(manifest["base_path"])
    if not base_path.is_dir():
        raise AdapterError(f"the base recorded in {folder / MANIFEST_FILE} ({base_path}) no longer exists.")
    if weights_hash(folder) != manifest["weights_hash"]:
        raise LineageError(f"{folder}: the weights no longer hash to {manifest['weights_hash'][:12]} "
                           "recorded in its manifest; the folder was modified after merging.")
    if weights_hash(base_path) != manifest["input_weights_hash"]:
        raise LineageError(f"{base_path}: the base changed since {folder} was merged; cannot rebuild the stack.")
    adapter_dirs = [Path(entry["path"]) for entry in manifest["chain"][1:]]
    for adapter_dir in adapter_dirs:
        if not adapter_dir.is_dir():
            raise AdapterError(f"adapter folder {adapter_dir} from the manifest is gone; is the store still there?")
    config = json.loads((folder / "config.json").read_text())
    vocab = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    input_ids = probe_ids(int(vocab), batch, tokens, seed)
    with _quiet_loading():
        candidate, dtype = plain_logits(folder, input_ids)
        reference = stacked_logits(base_path, adapter_dirs, input_ids)
    result = compare(reference, candidate, TOLERANCE.get(dtype, 3e-2), dtype)
    if record:
        write_json_atomic(folder / MANIFEST_FILE, {**manifest, "verification": asdict(result)}, indent=2, sort_keys=True)
    return result
