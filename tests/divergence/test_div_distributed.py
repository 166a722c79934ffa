"""Data-parallel scoring (`pdbgym divergence --devices N`, torchrun): the report equals one process's.

Ranks are real gloo processes on CPU. Both runs use one thread per process (OMP_NUM_THREADS=1), so
fp32 kernels take the same paths and the JSON must match to the last digit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from div_models import make_record, tiny_model

from pdbgym.divergence.distributed import shard_batches
from pdbgym.rollouts.record import LogprobSemantics
from pdbgym.rollouts.synthetic import make_synthetic_cache

SEMANTICS = LogprobSemantics(engine="unit", temperature=0.7, top_p=1.0, top_p_renormalized=False)
ENV = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("dp")
    tiny_model("qwen3", seed=0).save_pretrained(root / "teacher")
    tiny_model("qwen3", seed=1).save_pretrained(root / "student")
    # 10 records of 30..400 tokens over 5 tasks: several forward batches under a 600-token budget.
    make_synthetic_cache(root / "cache", n_instances=5, samples=2, vocab=1000, lengths=(30, 400), seed=5)
    return root


def _divergence_args(setup: Path, out: Path) -> list[str]:
    return ["--cache", str(setup / "cache"), "--student", str(setup / "student"), "--teacher",
            str(setup / "teacher"), "--noise-floor", "--max-new-tokens", "6", "--token-budget", "600",
            "--bootstrap", "300", "--json", str(out)]


@pytest.mark.slow
def test_two_gloo_ranks_spawned_or_under_torchrun_give_the_one_process_report_to_the_last_digit(setup):
    cli = [sys.executable, "-m", "pdbgym.cli", "divergence"]
    one, two, ranked = setup / "one.json", setup / "two.json", setup / "torchrun.json"
    _run([*cli, *_divergence_args(setup, one), "--devices", "1"])
    _run([*cli, *_divergence_args(setup, two), "--devices", "2"])
    reference = json.loads(one.read_text())
    assert json.loads(two.read_text()) == reference
    assert reference["students"][0]["compat"]["jsd_mean"] is not None  # samples were drawn and scored
    assert [s["name"] for s in reference["students"]] == ["student", "teacher:teacher"]
    _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
          "-m", "pdbgym.divergence", *_divergence_args(setup, ranked)])
    assert json.loads(ranked.read_text()) == reference


def test_shards_balance_padded_tokens_longest_first_and_keep_plan_order():
    lengths = [100, 90, 80, 40, 40, 30, 10, 10]
    batches = [[0], [1], [2], [3, 4], [5], [6, 7]]  # costs 100, 90, 80, 80, 30, 20
    shards = shard_batches(batches, lengths, 2)
    assert shards == [[[0], [3, 4], [6, 7]], [[1], [2], [5]]]  # loads 200 and 200
    assert sorted(map(tuple, sum(shards, []))) == sorted(map(tuple, batches))
    assert shard_batches(batches, lengths, 2) == shards  # deterministic
    three = shard_batches(batches, lengths, 3)
    loads = [sum(len(b) * max(lengths[i] for i in b) for b in shard) for shard in three]
    # Optimal: two of the four largest (100, 90, 80, 80) must share a rank, so 160 is the least maximum.
    assert sorted(loads) == [120, 120, 160]
    assert shard_batches([[0]], [5], 3) == [[[0]], [], []]  # more ranks than batches: idle ranks
    with pytest.raises(ValueError):
        shard_batches(batches, lengths, 0)


def _records():
    rng = np.random.default_rng(11)
    # Lengths descend then ascend, so the longest-first deal interleaves the ranks' records.
    sizes = [20, 260, 35, 180, 12, 300, 50, 90, 8, 140]
    return [make_record(rng, f"t{i % 4}", 6, n, sample_idx=i) for i, n in enumerate(sizes)]


def _order_worker(rank: int, model_dir: str, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from pdbgym.divergence.distributed import DataParallel
    from pdbgym.divergence.scoring import ScoringConfig

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    scores = DataParallel(rank, 2).score(model, _records(), SEMANTICS,
                                         ScoringConfig(token_budget=400, show_progress=False))
    if rank == 0:
        np.savez(out, *scores)
    # Leave together, as the CLI's ranks do: a rank tearing its gloo pairs down while rank 0 still
    # writes can abort in gloo's teardown ("terminate called without an active exception").
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.slow
def test_gathered_scores_come_back_in_record_order(setup, tmp_path):
    import torch
    import torch.multiprocessing as mp
    from transformers import AutoModelForCausalLM

    from pdbgym.divergence.distributed import _free_port
    from pdbgym.divergence.scoring import ScoringConfig, plan_record_batches, record_lengths, score_records

    records, config = _records(), ScoringConfig(token_budget=400, show_progress=False)
    shards = shard_batches(plan_record_batches(records, config), record_lengths(records), 2)
    owned = [sorted(i for batch in shard for i in batch) for shard in shards]
    assert owned[0][0] < owned[1][-1] and owned[1][0] < owned[0][-1]  # ranks own interleaved records
    out = tmp_path / "scores.npz"
    mp.start_processes(_order_worker, args=(str(setup / "student"), _free_port(), str(out)), nprocs=2,
                       start_method="spawn")
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(setup / "student", dtype=torch.float32).eval()
    expected = score_records(model, records, SEMANTICS, config)
    with np.load(out) as data:
        gathered = [data[f"arr_{i}"] for i in range(len(data.files))]
    assert [len(g) for g in gathered] == [int(sum(r.loss_mask)) for r in records]
    for got, want in zip(gathered, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_bad_device_requests_are_refused_before_any_process_starts(setup):
    from pdbgym.divergence.compare import DivergenceConfig, compare
    from pdbgym.errors import PdbgymError

    with pytest.raises(PdbgymError, match="--devices must be >= 1"):
        compare(DivergenceConfig(students=[str(setup / "student")], cache=setup / "cache", devices=0))
    with pytest.raises(PdbgymError, match="--devices 1"):
        compare(DivergenceConfig(students=[str(setup / "student")], cache=setup / "cache", devices=2,
                                 teacher="http://127.0.0.1:9"))
    with pytest.raises(PdbgymError, match="--teacher-device-map"):
        compare(DivergenceConfig(students=[str(setup / "student")], cache=setup / "cache", devices=2,
                                 teacher=str(setup / "teacher"), teacher_device_map="auto"))


def test_a_device_mapped_teacher_loads_through_accelerate_and_scores_the_same(setup):
    """On this CPU-only machine accelerate's map puts every layer on the CPU: the loading path and the
    scorer's cross-device handling run, the split over several GPUs itself cannot."""
    from pdbgym.divergence.scoring import ScoringConfig, score_records
    from pdbgym.modelload import ModelLoadError, load_causal_lm

    records, config = _records()[:4], ScoringConfig(show_progress=False)
    mapped = load_causal_lm(setup / "teacher", "cpu", device_map="auto")
    assert next(mapped.parameters()).device.type == "cpu"
    plain = load_causal_lm(setup / "teacher", "cpu")
    for got, want in zip(score_records(mapped, records, SEMANTICS, config),
                         score_records(plain, records, SEMANTICS, config), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ModelLoadError, match="not one of auto"):
        load_causal_lm(setup / "teacher", "cpu", device_map="everywhere")
