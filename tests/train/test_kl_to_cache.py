"""One KL to a teacher cache: the evaluation's arms, the experiment's KL to the oracle and DAgger's KL give the
same number (the divergence library's token mean) for the same model and cache, and train/ reaches the
divergence library through that one entry point only."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from recordfixtures import episode_record, write_records

from pdbgym.rollouts.record import LogprobSemantics

POINT_MASS = LogprobSemantics(engine="deterministic", temperature=1.0)  # what the scripted oracle records
SAMPLED = LogprobSemantics(engine="hf", temperature=1.0)
# Tasks with different numbers of runs and turns: a mean of per-task (or per-record) means differs from the
# pooled token mean, so a caller aggregating another way would not agree.
PLAN = {
    "t1": [[("b calc.py:3", "Breakpoint 1 at calc.py:3"), ("c", "> calc.py(3)sub()")]],
    "t2": [[("p a - b", "5")], [("n", "> calc.py(4)"), ("p result", "12"), ("edit calc.py", "edited"),
                                ("submit", "graded: 1 passed")]],
    "t3": [[("where", "-> return a + b")]],
}


def _cache(folder: Path, tokenizer, semantics: LogprobSemantics) -> Path:
    rng = np.random.default_rng(0)
    records = []
    for task, runs in PLAN.items():
        for run, turns in enumerate(runs):
            record = episode_record(tokenizer, task, turns, sample_idx=run)
            if semantics.engine != "deterministic":  # a sampled teacher's own (made-up) log-probs
                record.rollout_log_probs = [-float(rng.exponential(1.0)) if bit else 0.0 for bit in record.loss_mask]
            record.metadata["logprob_semantics"] = semantics.to_dict()
            records.append(record)
    return write_records(folder, records)


def _pooled_neg_logprob(model_dir: Path, cache: Path) -> tuple[float, list[float]]:
    """-log q of every scored cached token, from one plain full-vocabulary forward per record: the pooled
    mean and each task's mean (an independent reference for the deterministic teacher's k1)."""
    import torch
    from transformers import AutoModelForCausalLM

    from pdbgym.rollouts.cache import read_cache

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    values: dict[str, list[float]] = {}
    for record in read_cache(cache):
        with torch.no_grad():
            logits = model(torch.tensor([record.tokens])).logits[0].double()
        logprobs = torch.log_softmax(logits, dim=-1)
        for offset, bit in enumerate(record.loss_mask):
            position = record.prompt_len + offset
            if bit:
                values.setdefault(record.instance_id, []).append(-float(logprobs[position - 1, record.tokens[position]]))
    pooled = [v for task in values.values() for v in task]
    return float(np.mean(pooled)), [float(np.mean(v)) for v in values.values()]


@pytest.mark.parametrize("semantics", [POINT_MASS, SAMPLED], ids=["deterministic-teacher", "sampled-teacher"])
def test_arms_demo_and_dagger_give_the_same_kl(tmp_path, smol_tokenizer, tiny_model_dir, semantics):
    from pdbgym.divergence.tocache import kl_to_cache
    from pdbgym.evaluate.arm_figures import oracle_kl
    from pdbgym.evaluate.divergence_arms import ArmDivergenceConfig, arm_divergence
    from pdbgym.train.dagger.config import DaggerConfig
    from pdbgym.train.dagger.policy import load_policy
    from pdbgym.train.dagger.scores import kl_to_cache as dagger_kl

    cache = _cache(tmp_path / "cache", smol_tokenizer, semantics)
    model = str(tiny_model_dir)
    direct = kl_to_cache(model, cache)
    estimator = "k1" if semantics.engine == "deterministic" else "k3"
    assert direct.metric == f"kl_teacher_student/{estimator}/token_mean"
    assert direct.n_tasks == 3 and direct.n_records == 4 and direct.value is not None and direct.value > 0

    arm = arm_divergence({"m": model}, ArmDivergenceConfig(cache))["arms"]["m"]["metrics"][direct.metric]
    demo = oracle_kl(cache, {"m": model}, tmp_path / "kl.json")["arms"]["m"]
    config = DaggerConfig(student=model, teacher=model, tasks="unused", out=tmp_path / "dagger",
                          store=tmp_path / "store")
    dagger = dagger_kl(load_policy(model, config, "cpu"), cache)  # the policy's own in-memory model

    assert arm["value"] == pytest.approx(direct.value, rel=1e-9)
    assert demo["kl_per_token"] == pytest.approx(direct.value, rel=1e-9)
    assert dagger == pytest.approx(direct.value, rel=1e-6)
    assert (arm["ci_low"], arm["ci_high"]) == pytest.approx((direct.ci_low, direct.ci_high), rel=1e-9)
    assert (demo["ci_low"], demo["ci_high"]) == pytest.approx((direct.ci_low, direct.ci_high), rel=1e-9)
    assert demo["tasks"] == 3 and demo["tokens"] == direct.n_tokens
    # The aggregation is the pooled token mean: the mean of the per-task means is another number here.
    assert abs(np.mean(list(direct.per_task.values())) - direct.value) > 1e-3
    if semantics.engine == "deterministic":  # k1 of a point-mass teacher is the model's -log q, exactly
        pooled, per_task = _pooled_neg_logprob(tiny_model_dir, cache)
        assert direct.value == pytest.approx(pooled, rel=1e-5)
        assert list(direct.per_task.values()) == pytest.approx(per_task, rel=1e-5)


def test_window_and_a_cache_with_nothing_scored(tmp_path, smol_tokenizer, tiny_model_dir):
    from pdbgym.divergence.tocache import kl_to_cache, open_teacher_cache
    from pdbgym.errors import PdbgymError

    cache = _cache(tmp_path / "cache", smol_tokenizer, POINT_MASS)
    whole = open_teacher_cache(cache)
    prompt = whole.records[0].prompt_len
    window = open_teacher_cache(cache, max_ids=prompt + 3)
    assert all(len(r.tokens) <= prompt + 3 and len(r.loss_mask) == len(r.rollout_log_probs) for r in window.records)
    cut, full = kl_to_cache(str(tiny_model_dir), window), kl_to_cache(str(tiny_model_dir), whole)
    scored = sum(sum(r.loss_mask[:3]) for r in whole.records)  # the assistant ids among each record's first 3
    assert cut.n_tokens == scored < full.n_tokens and cut.value != full.value
    with pytest.raises(PdbgymError, match="no scored token .* in the first 2 ids"):
        open_teacher_cache(cache, max_ids=2)


def test_train_reaches_the_divergence_library_through_its_entry_point_only():
    package = Path(__file__).resolve().parents[2] / "pdbgym" / "train"
    found = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pdbgym.divergence"):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("pdbgym.divergence")}
    assert found == {"pdbgym.divergence.tocache"}
