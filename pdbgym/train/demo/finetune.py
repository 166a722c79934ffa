"""The demo's ``sft`` phase: a LoRA adapter on the base by ``train.sft.trainer.train_sft``, registered in
``OUT/adapters`` as ``demo-sft``, and the folder of that adapter merged into the base for the eval arms."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pdbgym.adapters.stacked import materialize_ref
from pdbgym.adapters.store import Store
from pdbgym.train.demo.config import DemoConfig
from pdbgym.train.sft.config import SFTTrainConfig
from pdbgym.train.sft.resume import is_finished, read_train_record
from pdbgym.train.sft.trainer import train_sft

ADAPTER_NAME = "demo-sft"


def sft_done(config: DemoConfig) -> bool:
    return is_finished(Path(config.out) / "sft")


def train_demo_sft(config: DemoConfig, on_log: Callable[[dict[str, Any], int], None]) -> dict[str, Any]:
    """LoRA SFT of the embedded model on the corpus, or the finished run's record; returns the record."""
    import torch  # optional: torch (pdbgym[hf])

    out = Path(config.out) / "sft"
    if not sft_done(config):
        import datasets  # optional: datasets (pdbgym[train])

        datasets.disable_progress_bars()  # per-dataset bars; the demo's own progress covers the phase
        shutil.rmtree(out, ignore_errors=True)  # a killed run's checkpoints are of a run that no longer resumes
        torch.set_num_threads(config.threads)
        train_sft(SFTTrainConfig(base=config.base, data=Path(config.out) / "corpus", out=out, seed=config.seed,
                                 rank=config.rank, use_dora=False, lr=config.lr, effective_batch=1,
                                 max_steps=config.sft_steps, max_length=config.sft_tokens,
                                 max_tokens_per_example=config.sft_tokens, val_fraction=0.2,
                                 eval_steps=max(1, config.sft_steps // 4), device="cpu", name=ADAPTER_NAME,
                                 store=Path(config.out) / "adapters", report=True), on_log=on_log)
    return read_train_record(out)


def sft_model_folder(config: DemoConfig) -> Path:
    """The SFT adapter merged into the base (``$PDBGYM_HOME/merged/<id>``, made once)."""
    return materialize_ref(ADAPTER_NAME, Store(Path(config.out) / "adapters"))
