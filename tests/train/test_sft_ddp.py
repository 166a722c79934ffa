"""`pdbgym train sft` on 2 DDP processes (accelerate launch with the shipped ddp.yaml, gloo on CPU) follows
the loss curve of 1 process with the same global batch, as DDP promises.

Why the curves must agree: transformers' Trainer seeds one sampler permutation on every process and
accelerate deals consecutive per-device batches of it to the ranks (``DataLoaderShard``,
``split_batches=False``), so step k's global batch (micro batch 1 on each of 2 ranks) holds the same 2
examples as micro batch 2 on one process; the loss is normalized by the global count of loss tokens
(``average_tokens_across_devices``) and DDP averages gradients, so each step's update is the same sum.
What differs is float arithmetic only: per-rank padding widths, the order of the gradient reduction, and
the logged loss gathered from ranks. On fp32 CPU that measured <= 1e-7 relative over 4 steps (1e-6 nats on
10.77); the tolerance is 2e-5 relative, ten times below the smallest step-to-step change of the curve
(asserted), so a run that saw its examples in other batches or another order cannot pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from recordfixtures import episode_record, write_records

from pdbgym.train.corpus.build import CorpusConfig, build_corpus

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
DDP_CONFIG = REPO / "pdbgym" / "train" / "configs" / "ddp.yaml"
COMMANDS = ["b calc.py:3", "p a, b", "view calc.py 1 9", "edit calc.py 3 3 return a - b", "run_tests", "submit"]


def _corpus(root: Path, tokenizer) -> Path:
    records = []
    for task in range(4):
        for sample in range(2):
            # Varied turn counts: unequal lengths, so per-rank padding differs from the 1-process batch.
            turns = [(COMMANDS[(task + sample + i) % len(COMMANDS)], f"output {task} {i}")
                     for i in range(1 + (task + sample) % 3)]
            records.append(episode_record(tokenizer, f"task{task}", turns, sample_idx=sample))
    build_corpus(CorpusConfig(caches=[write_records(root / "cache", records)], out=root / "corpus"))
    return root / "corpus"


def _sft_args(base: Path, corpus: Path, out: Path, micro_batch: int) -> list[str]:
    return ["-m", "pdbgym.cli", "train", "sft", "--base", str(base), "--data", str(corpus), "--out", str(out),
            "--micro-batch", str(micro_batch), "--effective-batch", "2", "--max-steps", "4", "--val-fraction", "0",
            "--rank", "4", "--lr", "3e-2", "--device", "cpu", "--no-register", "--no-report", "--no-tensorboard",
            "--store", str(out.parent / "store")]


def _losses(out: Path) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if "loss" in row]


def _run(argv: list[str]) -> None:
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=400, env=env, cwd=REPO)
    assert result.returncode == 0, result.stderr[-4000:]


def test_two_ddp_processes_follow_the_one_process_loss_curve(tmp_path, smol_tokenizer, tiny_model_dir):
    corpus = _corpus(tmp_path, smol_tokenizer)
    _run([sys.executable, *_sft_args(tiny_model_dir, corpus, tmp_path / "one", micro_batch=2)])
    _run([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(DDP_CONFIG),
          "--num_processes", "2", "--mixed_precision", "no",
          *_sft_args(tiny_model_dir, corpus, tmp_path / "two", micro_batch=1)])
    one, two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(one) == len(two) == 4
    tolerance = 2e-5
    steps_apart = min(abs(a - b) / abs(a) for a, b in zip(one, one[1:], strict=False))
    assert steps_apart > 10 * tolerance, one  # each step's batch gives a loss of its own
    assert two == pytest.approx(one, rel=tolerance)
    assert (tmp_path / "two" / "adapter" / "adapter_model.safetensors").is_file()
