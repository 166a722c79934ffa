"""The BC anchor and the replay seed inside a real GRPO run, from an SFT corpus."""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from homefixtures import fresh_home

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_toy import make_toy_model, make_toy_tasks, toy_config, toy_play  # noqa: E402


def _toy_corpus(out: Path, model_dir: Path, fingerprint_of=None) -> Path:
    from transformers import AutoTokenizer

    from pdbgym.rollouts.record import tokenizer_fingerprint
    from pdbgym.train.corpus.build import Example, write_corpus

    tokenizer = AutoTokenizer.from_pretrained(fingerprint_of or model_dir)
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    examples = []
    for task in ("toy__0", "toy__1"):
        prompt, turn1, obs, turn2 = ids("w4 w8"), ids("w2 w3"), ids("w5 w6 w7"), ids("w9 w2")
        examples.append(Example(task, "toy", 0, "test", True, prompt + turn1 + obs + turn2,
                                [0] * len(prompt) + [1] * len(turn1) + [0] * len(obs) + [1] * len(turn2)))
    write_corpus(out, examples, {"fingerprint": tokenizer_fingerprint(tokenizer), "name": "toy"})
    return out


def test_anchor_batches_take_loss_only_on_masked_ids_and_replay_splits_at_the_first_model_id():
    from pdbgym.train.corpus.example import Example
    from pdbgym.train.grpo.data import AnchorBatches, replay_sample

    example = Example("t", "d", 0, "test", True, [5, 6, 7, 8, 9, 10], [0, 0, 1, 1, 0, 1])
    shorter = replace(example, input_ids=[5, 6, 7], assistant_masks=[0, 1, 1])
    input_ids, attention, labels = AnchorBatches([example, shorter], 2, 64, 0).batch(0)
    assert labels.tolist() == [[-100, -100, 7, 8, -100, 10], [-100, 6, 7, -100, -100, -100]]
    assert attention.tolist()[1] == [1, 1, 1, 0, 0, 0]
    sample = replay_sample(example)
    assert sample.prompt_ids == [5, 6] and sample.completion_ids == [7, 8, 9, 10]
    assert sample.env_mask == [1, 1, 0, 1] and sample.facts["final_test_passed"] and sample.facts["replayed"]


def test_grpo_run_mixes_the_anchor_and_replays_solved_examples(tmp_path, monkeypatch):
    from pdbgym.train.grpo.run import train_grpo
    from pdbgym.train.grpo.schedules import anchor_weight, replayed_per_group

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    model, tasks = make_toy_model(tmp_path / "toy-model"), make_toy_tasks(tmp_path / "toy-tasks")
    corpus = _toy_corpus(tmp_path / "corpus", model)
    config = toy_config(tmp_path / "run", model, tasks, steps=4, save_steps=4, anchor_data=corpus, anchor_weight=0.5,
                        anchor_decay_steps=4, replay_data=corpus, replay_fraction=0.5, replay_decay_steps=4)
    train_grpo(config, play=toy_play)
    rows = [json.loads(line) for line in (tmp_path / "run" / "steps.jsonl").read_text().splitlines()]
    for row in rows:
        step = row["step"] - 1  # the step being taken (global_step before it)
        assert row["bc/weight"] == pytest.approx(anchor_weight(step, 0.5, 4))
        assert row["bc/nll"] > 0
    expected = sum(sum(replayed_per_group(step, 8, 2, 0.5, 4)) for step in range(4))  # 2 groups a step
    assert rows[-1]["episodes/replayed_total"] == expected > 0
    # outcomes.jsonl: every episode of every step, by task, the replayed ones marked as such
    outcomes = [json.loads(line) for line in (tmp_path / "run" / "outcomes.jsonl").read_text().splitlines()]
    assert [o["step"] for o in outcomes] == [r["step"] for r in rows] == [1, 2, 3, 4]
    for outcome, row in zip(outcomes, rows, strict=True):
        assert len(outcome["episodes"]) == 16 and {e["task"] for e in outcome["episodes"]} <= {"toy__0", "toy__1"}
        replayed = [e for e in outcome["episodes"] if e["replayed"]]
        assert len(replayed) == row["episodes/replayed"] and all(e["solved"] for e in replayed)
        played = [e["solved"] for e in outcome["episodes"] if not e["replayed"]]
        assert sum(played) / len(played) == pytest.approx(row["episodes/solve_rate"])


def test_a_corpus_from_another_tokenizer_is_refused(tmp_path, monkeypatch, tiny_model_dir):
    from pdbgym.train.corpus.build import CorpusError
    from pdbgym.train.grpo.run import train_grpo

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    model, tasks = make_toy_model(tmp_path / "toy-model"), make_toy_tasks(tmp_path / "toy-tasks")
    corpus = _toy_corpus(tmp_path / "corpus", model, fingerprint_of=tiny_model_dir)
    with pytest.raises(CorpusError, match="fingerprint"):
        train_grpo(toy_config(tmp_path / "run", model, tasks, steps=1, anchor_data=corpus), play=toy_play)
