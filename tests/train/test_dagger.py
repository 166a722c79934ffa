"""Online DAgger on two built-in tasks with a tiny student and a tiny teacher sharing a tokenizer:
real episodes, teacher labels on the student's own states (token-exact), aggregation, lineage iter0/iter1."""

from __future__ import annotations

import json
import shutil

import pytest

from pdbgym.episode_defaults import EpisodeSettings
from pdbgym.tasks.suites import SUITES
from pdbgym.train.dagger.config import DaggerConfig

from modelfixtures import save_tiny_llama

TRAIN_TASKS = ("logstats-level-counts", "latency-percentiles")
SFT = {"rank": 4, "lr": 5e-2, "effective_batch": 1, "max_steps": 1}


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory, smol_tokenizer):
    return save_tiny_llama(tmp_path_factory.mktemp("teacher"), smol_tokenizer, seed=3)


def _config(tmp_path, student, teacher, **options) -> DaggerConfig:
    tasks = tmp_path / "tasks"
    for name in TRAIN_TASKS:
        if not (tasks / name).exists():
            shutil.copytree(SUITES["builtin"] / name, tasks / name)
    values = dict(student=str(student), teacher=str(teacher), tasks=str(tasks), out=tmp_path / "dagger",
                  iterations=2, episode=EpisodeSettings(turn_budget=2, max_new_tokens=8, max_context_tokens=2048), sft=SFT,
                  store=tmp_path / "store", ledger=tmp_path / "ledger.jsonl", device="cpu")
    values.update(options)
    return DaggerConfig(**values)


def test_two_iterations_label_student_states_and_record_lineage(tmp_path, tiny_model_dir, teacher_dir):
    from pdbgym.adapters.fingerprint import weights_hash
    from pdbgym.adapters.store import Store
    from pdbgym.rollouts.cache import read_cache
    from pdbgym.train.corpus.build import load_corpus
    from pdbgym.train.dagger.labels import turn_spans
    from pdbgym.train.dagger.loop import train_dagger
    from pdbgym.train.dagger.policy import load_policy
    from pdbgym.train.dagger.scores import kl_to_cache
    from pdbgym.train.errors import DaggerError

    config = _config(tmp_path, tiny_model_dir, teacher_dir)
    result = train_dagger(config)
    rows = result.rows
    assert [r.iteration for r in rows] == [0, 1]
    store = Store(config.store)
    parent = weights_hash(tiny_model_dir)
    for row in rows:
        node = store.get(store.resolve(f"dagger-iter{row.iteration}"))
        assert node["parent"] == parent  # every iterate is trained from iteration 0's parent
        assert row.student_episodes == 2 and row.labels_new > 0
    corpus0 = load_corpus(config.out / "iter0" / "corpus")
    corpus1 = load_corpus(config.out / "iter1" / "corpus")
    hashes0 = [e.content_hash for e in corpus0.examples]
    hashes1 = [e.content_hash for e in corpus1.examples]
    # The aggregate holds each (state, label) once: the greedy teacher labels every episode's first state
    # (the task's prompt) the same way in both iterations, so the two iterations' labels overlap.
    assert len(set(hashes1)) == len(hashes1) == rows[1].labels_total
    assert len(hashes0) == rows[0].labels_total <= rows[0].labels_new
    assert rows[1].labels_total < rows[0].labels_new + rows[1].labels_new
    assert {e.content_hash for e in corpus0.examples} <= {e.content_hash for e in corpus1.examples}
    # every label is a state the student reached (its record's ids up to a turn) plus the teacher's turn
    transcripts = sorted((config.out / "iter0" / "transcripts").glob("*.json"))
    assert len(transcripts) == 2
    states = []
    for path in transcripts:
        messages = json.loads(path.read_text())["messages"]
        assert messages[0]["role"] == "system"
    for example in corpus0.examples:
        state_len = example.assistant_masks.index(1)
        assert set(example.assistant_masks[state_len:]) == {1}
        states.append(tuple(example.input_ids[:state_len]))
    assert all(len(s) > 0 for s in states)
    report = json.loads((config.out / "training_report.json").read_text())
    assert [r["adapter"] for r in report["tables"]["Iterations"]] == ["dagger-iter0", "dagger-iter1"]
    # the states are exactly the student's record prefixes
    records = read_cache(config.out / "iter0" / "rollouts")
    prefixes = {tuple(r.tokens[:start]) for r in records for start, _ in turn_spans(r)}
    assert set(states) <= prefixes
    # KL to a cache of the initial student's own samples: zero for that student, not for the iterate
    cache = config.out / "iter0" / "rollouts"
    kl_initial = kl_to_cache(load_policy(str(tiny_model_dir), config, "cpu"), cache)
    kl_iterate = kl_to_cache(load_policy("dagger-iter1", config, "cpu"), cache)
    assert kl_initial == pytest.approx(0.0, abs=1e-5) and kl_iterate > max(1e-5, 10 * kl_initial)
    with pytest.raises(DaggerError, match="already holds dagger-iter0, dagger-iter1"):
        train_dagger(config)  # a rerun into the same store is refused before any episode


def test_turn_spans_are_runs_of_generated_ids():
    from pdbgym.rollouts.record import RolloutRecord
    from pdbgym.train.dagger.labels import turn_spans

    record = RolloutRecord("t", "d", list(range(12)), 3, 9, [1, 1, 0, 0, 1, 0, 1, 1, 1], [0.0] * 9)
    assert turn_spans(record) == [(3, 5), (7, 8), (9, 12)]


def test_a_teacher_that_cannot_label_states_is_refused(tmp_path, tiny_model_dir):
    from pdbgym.train.dagger.loop import train_dagger
    from pdbgym.train.errors import DaggerError

    with pytest.raises(DaggerError, match="cannot label the student's states"):
        train_dagger(_config(tmp_path, tiny_model_dir, "scripted"))


def test_a_teacher_with_another_tokenizer_is_refused(tmp_path, tiny_model_dir):
    from pdbgym.train.dagger.loop import train_dagger
    from pdbgym.train.errors import DaggerError

    from modelfixtures import word_tokenizer

    words = word_tokenizer(64)
    words.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    other = save_tiny_llama(tmp_path / "other", words)
    with pytest.raises(DaggerError, match="fingerprint"):
        train_dagger(_config(tmp_path, tiny_model_dir, other))


def test_val_tasks_in_training_are_refused(tmp_path, tiny_model_dir, teacher_dir):
    from pdbgym.train.corpus.build import CorpusError
    from pdbgym.train.dagger.loop import train_dagger

    splits = tmp_path / "splits.json"
    splits.write_text(json.dumps({"splits": {"val": [{"instance_id": "builtin__latency-percentiles"}]}}))
    with pytest.raises(CorpusError, match="builtin__latency-percentiles \\(val\\)"):
        train_dagger(_config(tmp_path, tiny_model_dir, teacher_dir, splits=splits))


def test_val_pass1_comes_from_real_episodes_and_evaluate_statistics(tmp_path, tiny_model_dir):
    from pdbgym.tasks.suites import resolve_tasks
    from pdbgym.train.dagger.policy import load_policy
    from pdbgym.train.dagger.scores import val_pass1

    config = _config(tmp_path, tiny_model_dir, tiny_model_dir, eval_runs=1)
    task = resolve_tasks(str(tmp_path / "tasks" / TRAIN_TASKS[0]))
    mean, interval = val_pass1(load_policy(str(tiny_model_dir), config, "cpu"), task, config, tmp_path / "val")
    assert mean == 0.0  # random weights never fix the bug
    low, high = (float(x) for x in interval.strip("[]").split(","))
    assert low == 0.0 and 0.0 < high < 1.0  # a Wilson bound keeps a width at 0%
    assert len(list((tmp_path / "val").glob("*.json"))) == 1
    assert val_pass1(load_policy(str(tiny_model_dir), config, "cpu"), [], config, tmp_path / "none") is None


def test_kl_to_cache_refuses_a_constrained_teacher_cache(tmp_path, smol_tokenizer):
    """A cache drawn under a grammar is refused before any model scores it (same rule as divergence)."""
    from recordfixtures import episode_record, write_records

    from pdbgym.divergence.semantics import NotModelLogprobsError
    from pdbgym.rollouts.record import LogprobSemantics
    from pdbgym.train.dagger.scores import kl_to_cache

    record = episode_record(smol_tokenizer, "t1", [("call", "observation")])
    record.metadata["logprob_semantics"] = LogprobSemantics("hf", 1.0, constrained=True, grammar="g").to_dict()
    with pytest.raises(NotModelLogprobsError, match="drawn under a grammar"):
        kl_to_cache(None, write_records(tmp_path / "cache", [record]))  # type: ignore[arg-type]
