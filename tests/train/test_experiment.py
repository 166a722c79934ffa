"""``pdbgym experiment run``: the repository's experiment file, its quick profile on a tiny random model,
end to end on CPU (tasks, split, oracle caches, SFT, GRPO with val gates, held-out eval, report), resumed
stage by stage; settings errors refused by name; the learning check's arithmetic."""

from __future__ import annotations

import json

import pytest
from experimentfiles import REPO_FILE, quick_file
from homefixtures import fresh_home

from pdbgym.episode_defaults import GRPO_TEMPERATURE
from pdbgym.train.experiment.checks import learning_check, step_centred_check, task_paired_check
from pdbgym.train.experiment.config import ExperimentError, load_experiment


@pytest.mark.slow
def test_the_quick_profile_runs_every_stage_and_resumes(tmp_path, tiny_model_dir, monkeypatch):
    from typer.testing import CliRunner

    from pdbgym.cli import app

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    config, out = quick_file(tmp_path, tiny_model_dir), tmp_path / "run"
    result = CliRunner().invoke(app, ["experiment", "run", str(config), "--out", str(out), "--quick"])
    assert result.exit_code == 0, result.output
    state = json.loads((out / "experiment.json").read_text())
    assert list(state["stages"]) == ["tasks", "split", "oracle", "sft", "grpo", "matched", "eval", "temperatures",
                                     "report"]
    assert all(state["stages"]["split"][name] >= 1 for name in ("train", "val", "test"))
    assert state["stages"]["oracle"]["train"]["solved"] == state["stages"]["split"]["train"]  # the oracle solves all
    # GRPO's rollouts decoded real episodes from a merged copy of the policy (train/grpo/merged.py)
    assert json.loads((out / "grpo" / "grpo_run.json").read_text())["rollout_weights"] == "merged"
    outcomes = [json.loads(line) for line in (out / "grpo" / "outcomes.jsonl").read_text().splitlines()]
    assert [o["step"] for o in outcomes] == [1, 2] and all(len(o["episodes"]) == 2 for o in outcomes)
    # GRPO played the [quick.grpo] tasks = 2 picked from the train split, and no other task
    picked = sorted(p.name for p in (out / "tasks" / "grpo").iterdir())
    assert len(picked) == 2 and set(picked) <= {p.name for p in (out / "tasks" / "train").iterdir()}
    assert {e["task"] for o in outcomes for e in o["episodes"]} <= set(picked)
    report = (out / "report.md").read_text()
    for section in ("## GRPO steps", "## Val gates", "## Held-out test split", "## Paired comparisons",
                    "## Stop at peak", "| sft-best - base |", "- sft-matched |",
                    "## Held-out pass@1 by sampling temperature", "pass@1, greedy [95% CI]", "entropy, T1",
                    "`sft-matched`: SFT continued from GRPO's start",
                    "## Held-out pass@1 by rung of the task ladder", "Wrong-site fixation: no held-out task",
                    "## Held-out pass@1 by task set", "symptom (rung 1; held out whole)",
                    "### On-policy solve rate by rung of the task ladder", "Model arms sample at T = 1 ",
                    "## SFT strength (chosen on val)", "| sft-best, GRPO's start |"):
        assert section in report, section
    summary = json.loads((out / "eval-summary.json").read_text())
    assert set(summary["arms"]) == {"base", "sft-best", "sft-matched", "grpo", "oracle"}
    assert summary["arms"]["oracle"]["solved"] > 0
    # greedy too ([quick.eval] temperatures), one run a task, the trained arms only (the base and the oracle
    # are controls, played at the primary temperature); each model arm's sampled entropy at T = 1
    greedy = json.loads((out / "eval-summary-greedy.json").read_text())
    assert set(greedy["arms"]) == {"sft-best", "sft-matched", "grpo"}
    assert set(state["stages"]["temperatures"]["by_temperature"]["greedy"]) == set(greedy["arms"])
    entropy = json.loads((out / "eval" / "entropy.json").read_text())
    assert set(entropy) == {"base", "sft-best", "sft-matched", "grpo"} and entropy["grpo"]["nats_per_token"] > 0
    # the matched control: as many updates as GRPO took, on the anchor (and any replayed) examples, no reward
    matched = json.loads((out / "matched" / "matched.json").read_text())
    assert matched["updates"] == 2 and matched["anchor"] == 2 and state["stages"]["matched"]["updates"] == 2
    # a kill after the GRPO stage: the rerun plays only what is left, and --until eval stops before the extra
    # temperatures (seeds sharing a machine each get their primary figures first)
    del state["stages"]["eval"], state["stages"]["temperatures"], state["stages"]["report"]
    (out / "experiment.json").write_text(json.dumps(state))
    again = CliRunner().invoke(app, ["experiment", "run", str(config), "--out", str(out), "--quick", "--until", "eval",
                                     "--local-episodes", "2"])  # two model episodes at once, turns batched
    assert again.exit_code == 0, again.output
    for stage in ("tasks", "split", "oracle", "sft", "grpo", "matched"):
        assert f"[{stage}] finished earlier" in again.output
    assert "[eval] started" in again.output and "[temperatures]" not in again.output
    assert "temperatures" not in json.loads((out / "experiment.json").read_text())["stages"]
    # the same folder with other settings is refused, naming the digest
    other = config.read_text().replace("seed = 0", "seed = 1")
    config.write_text(other)
    refused = CliRunner().invoke(app, ["experiment", "run", str(config), "--out", str(out), "--quick"])
    assert refused.exit_code != 0 and "other settings" in str(refused.exception)


def test_the_repository_file_loads_and_settings_errors_are_named(tmp_path):
    for path in sorted(REPO_FILE.parent.glob("*.toml")):  # every experiment the repository ships
        full, quick = load_experiment(path), load_experiment(path, quick=True)
        assert full.grpo.steps > quick.grpo.steps and full.tasks.families["ladder0"] > quick.tasks.families["ladder0"]
        assert full.digest() != quick.digest()
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[grpo]\nstepz = 3\n[tasks]\nfamilies = { ladder0 = 2 }\n')
    with pytest.raises(ExperimentError, match="stepz"):
        load_experiment(bad)
    bad.write_text('name = "x"\n[tasks]\nfamilies = { ladder0 = 2 }\n[eval]\nruns = 2\nk = [4]\n')
    with pytest.raises(ExperimentError, match="k = \\[4\\]"):
        load_experiment(bad)
    with pytest.raises(ExperimentError, match="quick"):
        load_experiment(bad, quick=True)
    # the held-out arms sample as GRPO's rollouts do unless the file says otherwise; a bad value is named
    assert load_experiment(REPO_FILE).eval.temperature == GRPO_TEMPERATURE == 1.0
    bad.write_text('name = "x"\n[tasks]\nfamilies = { ladder0 = 2 }\n[eval]\ntemperature = -0.5\n')
    with pytest.raises(ExperimentError, match="temperature = -0.5"):
        load_experiment(bad)
    with pytest.raises(ExperimentError, match="no such experiment file"):
        load_experiment(tmp_path / "missing.toml")
    bad.write_text('name = "x"\n[tasks]\nfamilies = { ladder0 = 2 }\n[grpo]\ntasks = 3\ntasks_per_step = 4\n')
    with pytest.raises(ExperimentError, match="tasks = 3 must be 0"):
        load_experiment(bad)
    for sft, error in (("steps = 8\ncandidates = [8, 16]", "give one of steps"), ("candidates = [8, 8]", "distinct"),
                       ("candidates = [0, 4]", "distinct step counts >= 1"), ("candidates = 8", "a list"),
                       ("candidates = [8]\ntarget = 1.0", "target = 1.0 must lie in")):
        bad.write_text(f'name = "x"\n[tasks]\nfamilies = {{ ladder0 = 2 }}\n[sft]\n{sft}\n')
        with pytest.raises(ExperimentError, match=error):
            load_experiment(bad)


def test_the_sft_start_nearest_the_target_is_chosen_and_ties_take_more_steps(tmp_path):
    from pdbgym.train.experiment.run import nearest_to_target, sft_name

    assert nearest_to_target({8: 0.1, 16: 0.45, 32: 0.7, 64: 0.85}, 0.5) == 16
    assert nearest_to_target({8: 0.3, 16: 0.7}, 0.5) == 16  # equally far: the stronger model
    assert nearest_to_target({8: 0.0, 16: 0.0}, 0.5) == 16
    assert nearest_to_target({8: 0.2, 64: 0.95}, 0.9) == 64
    # GRPO and the evaluation ask which SFT model was chosen; before the sft stage chose one, that is an error
    with pytest.raises(ExperimentError, match="choice.json is missing: the sft stage chooses"):
        sft_name(load_experiment(REPO_FILE), tmp_path)


def test_the_report_warns_when_no_sft_candidate_brackets_the_target(tmp_path):
    from pdbgym.reportkit import markdown
    from pdbgym.train.experiment.report import sft_choice_blocks

    def lines(scores: dict[int, float]) -> str:
        (tmp_path / "sft").mkdir(exist_ok=True)
        (tmp_path / "sft" / "choice.json").write_text(json.dumps({
            "target": 0.5, "chosen": f"x-sft-s{max(scores)}", "steps": max(scores), "val_runs": 1,
            "candidates": {str(n): {"name": f"x-sft-s{n}", "pass@1": {"mean": v, "ci": [0.0, 1.0]}}
                           for n, v in scores.items()}}))
        return markdown(sft_choice_blocks(tmp_path))

    assert "No candidate solved a val episode" in lines({8: 0.0, 16: 0.0})
    assert "Every candidate solved every val episode" in lines({8: 1.0, 16: 1.0})
    bracketing = lines({8: 0.0, 16: 0.6})
    assert "| 16 | n/a | 60.0% [0.0%, 100.0%] | sft-best, GRPO's start |" in bracketing and "No candidate" not in bracketing
    assert not sft_choice_blocks(tmp_path / "elsewhere")  # a single SFT run: no section
    # GRPO started nearest the target, a weaker model than the best on val: both named, each with its role
    (tmp_path / "sft" / "choice.json").write_text(json.dumps({
        "target": 0.5, "start": "target", "chosen": "x-sft-s16", "steps": 16, "best": "x-sft-s64", "best_steps": 64,
        "val_runs": 1, "candidates": {str(n): {"name": f"x-sft-s{n}", "pass@1": {"mean": v, "ci": [0.0, 1.0]}}
                                      for n, v in {16: 0.4, 64: 0.8}.items()}}))
    weak = markdown(sft_choice_blocks(tmp_path))
    assert "| 16 | n/a | 40.0% [0.0%, 100.0%] | GRPO's start |" in weak and "| 64 | n/a | 80.0% [0.0%, 100.0%] | sft-best |" in weak
    assert "played held out as `sft-start` beside `sft-best` (`x-sft-s64`, the best on val)" in weak


def test_sft_best_is_the_best_on_val_and_ties_take_more_steps():
    from pdbgym.train.experiment.arms import best_on_val

    assert best_on_val({32: 0.2, 64: 0.7, 128: 0.6, 256: 0.5}) == 64
    assert best_on_val({32: 0.7, 64: 0.7}) == 64



def test_an_unknown_sft_start_rule_is_refused_by_name(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(REPO_FILE.read_text().replace('\nstart = "best"', '\nstart = "weakest"', 1))
    with pytest.raises(ExperimentError, match='start = .weakest.: give "best"'):
        load_experiment(bad)


def test_the_matched_control_gets_the_replayed_and_anchor_examples_grpo_trained_on():
    """GRPO's stage trained on, beside its own samples: each step's replayed trajectories (the pool's rotation
    per task) and, while the anchor weighs anything, its anchor batch (cycling over the corpus). The matched
    control is handed exactly those, once each time, for as many updates."""
    from pdbgym.train.corpus.example import Example
    from pdbgym.train.experiment.arms import matched_examples

    def example(task: str, n: int, solved: bool = True) -> Example:  # n: the example's place, as its sample_idx
        return Example(task, "d", n, "test", solved, [1, 2, 3, n], [0, 1, 1, 1],
                       termination_reason="solved" if solved else "budget")

    corpus = [example("a", 0), example("a", 1), example("b", 2), example("c", 3, solved=False)]
    played = {"task": "a", "solved": False, "replayed": False}
    outcomes = [{"step": 1, "episodes": [{"task": "a", "solved": True, "replayed": True}, played,
                                         {"task": "b", "solved": True, "replayed": True}]},
                {"step": 2, "episodes": [{"task": "a", "solved": True, "replayed": True}, played]},
                {"step": 3, "episodes": [{"task": "a", "solved": True, "replayed": True}, played]}]
    rules = {"anchor_batch": 3, "anchor_max_tokens": 4096, "replay_max_tokens": 4096}
    taken, counts = matched_examples(corpus, outcomes, anchor=0.1, anchor_decay_steps=2, **rules)
    # step 1: replay a 0, b 2, anchor [0, 1, 2]; step 2: a 1, anchor [3, 0, 1]; step 3: a 0 (the rotation wraps),
    # no anchor (its weight 0.1, 0.05, then 0)
    assert [e.sample_idx for e in taken] == [0, 2, 0, 1, 2, 1, 3, 0, 1, 0] and counts == {"replayed": 4, "anchor": 6,
                                                                                   "updates": 3}
    none, _ = matched_examples(corpus, [{"step": 1, "episodes": [played]}], anchor=0.0, anchor_decay_steps=0, **rules)
    assert none == []  # no replay and no anchor: nothing to match


def test_a_selection_by_another_rule_than_the_argmax_is_recorded_as_made(tmp_path):
    from pdbgym.errors import PdbgymError
    from pdbgym.evaluate.selection import SelectionLedger, check_reportable, record_selection

    ledger = SelectionLedger(tmp_path / "ledger.jsonl")
    made = record_selection("val", ["t1", "t2"], {"a": 0.9, "b": 0.5}, 0.1, ledger, chosen="b")
    assert made.chosen == "b" and [e.chosen for e in ledger.entries()] == ["b"]
    with pytest.raises(PdbgymError, match="refusing to report"):  # b was chosen on {t1, t2}: reporting it there is refused
        check_reportable(["b"], ["t2", "t1"], force=False, ledger=ledger)
    assert not check_reportable(["a"], ["t1", "t2"], force=False, ledger=ledger)
    again = record_selection("val", ["t2", "t1"], {"a": 0.9, "b": 0.5}, 0.1, ledger, chosen="b", once=True)
    assert again == made and len(ledger.entries()) == 1  # the same choice, recorded once
    record_selection("val", ["t1", "t2"], {"a": 0.9, "b": 0.5}, 0.1, ledger, once=True)  # another choice: a
    assert [e.chosen for e in ledger.entries()] == ["b", "a"]
    with pytest.raises(PdbgymError, match="'c' is not among"):
        record_selection("val", ["t1"], {"a": 0.9}, 0.1, ledger, chosen="c")


@pytest.mark.parametrize("name", ["smollm2-ladder.toml", "smollm2-ladder-short.toml", "smollm2-ladder-seeds.toml"])
def test_the_repository_experiments_put_every_task_in_the_first_and_last_quarter_of_grpo_steps(name):
    """The learning check pairs each task across the first and last quarter of the steps. TRL's sampler
    deals every task once an epoch, epochs starting at step 1, so the first quarter holds a whole epoch
    when it is at least an epoch long, and the last quarter does too when the steps end on an epoch."""
    g = load_experiment(REPO_FILE.with_name(name)).grpo
    epoch_steps, remainder = divmod(g.tasks, g.tasks_per_step)
    assert remainder == 0 and g.steps % epoch_steps == 0 and g.steps // 4 >= epoch_steps


def test_grpo_tasks_are_picked_by_rung_the_same_way_every_time():
    from pdbgym.train.experiment.run import pick_by_rung

    rungs = {f"a{i:02d}": 0 for i in range(30)} | {f"b{i:02d}": 1 for i in range(10)}
    picked = pick_by_rung(rungs, 8, seed=0)
    assert picked == sorted(picked) == pick_by_rung(rungs, 8, seed=0) != pick_by_rung(rungs, 8, seed=1)
    assert sum(t.startswith("a") for t in picked) == 6 and sum(t.startswith("b") for t in picked) == 2
    assert len(pick_by_rung(rungs, 7, seed=0)) == 7 and pick_by_rung(rungs, 40, seed=3) == sorted(rungs)
    with pytest.raises(ExperimentError, match="exceeds the 40 train task"):
        pick_by_rung(rungs, 41, seed=0)


def test_the_learning_check_compares_the_last_quarter_of_steps_with_the_first():
    rates = [0.0, 0.125, 0.125, 0.25, 0.0, 0.125, 0.0, 0.25, 0.125, 0.0] + [0.5] * 20 + \
        [0.75, 0.875, 0.75, 0.625, 0.875, 1.0, 0.75, 0.875, 0.75, 0.625]
    rows = [{"episodes/solve_rate": rate, "episodes/replayed": 0} for rate in rates]
    check = learning_check(rows, per_step=8)
    assert check["steps_per_quarter"] == 10 and check["episodes"] == [80, 80]
    assert check["first"] == pytest.approx(8 / 80) and check["last"] == pytest.approx(63 / 80)
    assert check["learned"] and check["ci"][0] > 0
    # the same rise over 8 steps is 2 steps against 2: too few clusters to show it
    short = learning_check([{"episodes/solve_rate": r} for r in (0.0, 0.125, 0.125, 0.25, 0.5, 0.625, 0.75, 0.875)], 8)
    assert short["diff"] == pytest.approx(0.75) and short["effective"] == [2.0, 2.0] and not short["learned"]
    from pdbgym.evaluate.stats import newcombe_from

    assert newcombe_from(13 / 16, 16, 1 / 16, 16)[0] > 0  # what counting its 32 episodes as independent claimed
    flat = learning_check([{"episodes/solve_rate": 0.25, "episodes/replayed": 2}] * 8, per_step=8)
    assert flat["diff"] == 0 and not flat["learned"] and flat["episodes"] == [12, 12]
    assert flat["first"] == pytest.approx(4 / 12)  # 2 of the 6 played episodes a step (0.25 x 6, rounded)


def test_the_task_paired_check_compares_each_task_with_itself():
    """Early steps drew mostly easy tasks and late steps mostly hard ones, while every task's own solve rate
    rose: the pooled steps move 8 points, each task against itself shows the whole rise."""
    def group(task: str, solved: int, replayed: bool = False) -> list[dict]:
        return [{"task": task, "solved": i < solved, "replayed": replayed} for i in range(4)]

    easy, hard = [f"e{i}" for i in range(8)], [f"h{i}" for i in range(8)]
    early = [sum((group(t, 3) for t in easy), []) + sum((group(t, 0) for t in hard[:4]), []),
             sum((group(t, 3) for t in easy), []) + sum((group(t, 0) for t in hard[4:]), []) + group("e0", 4, True)]
    late = [sum((group(t, 1 if t < "h4" else 2) for t in hard), []) + sum((group(t, 4) for t in easy[:4]), []),
            sum((group(t, 1 if t < "h4" else 2) for t in hard), []) + sum((group(t, 4) for t in easy[4:]), [])]
    middle = group("e1", 0) + group("h0", 4)  # an odd step count: the middle step is left out
    rows = [{"step": step, "episodes": episodes} for step, episodes in
            enumerate([*early, middle, *late], start=1)]
    pooled = [sum(e["solved"] for r in half for e in r["episodes"] if not e["replayed"]) / 96
              for half in (rows[:2], rows[3:])]
    assert pooled == pytest.approx([48 / 96, 56 / 96])  # the steps pooled: 8 points
    rows[-1]["episodes"] += group("only-late", 4)  # played in one half only: not paired
    check = task_paired_check(rows)
    assert check["steps_per_half"] == 2 and check["tasks"] == 16 and check["episodes"] == [96, 96]
    assert check["first"] == pytest.approx(6 / 16) and check["last"] == pytest.approx(11 / 16)
    assert check["diff"] == pytest.approx(5 / 16) and check["ci"][0] > 0.2 and check["learned"]  # 31 points
    # no rise on the same tasks: no learning, whatever the mix
    flat = [{"step": s, "episodes": group("a", 2) + group("b", 3)} for s in (1, 2, 3, 4)]
    assert task_paired_check(flat)["diff"] == 0 and not task_paired_check(flat)["learned"]
    assert task_paired_check(flat[:1]) is None  # one step has no halves
    assert task_paired_check(rows)["played"] == [16, 17]  # tasks played in each half
    assert task_paired_check([{"step": 1, "episodes": group("a", 2)}, {"step": 2, "episodes": group("b", 2)}]) is None


def test_quarters_of_whole_epochs_pair_every_task():
    """TRL's sampler deals every task once an epoch: with four epochs of steps each quarter holds every
    task once, so the quarter check pairs them all; tasks drawn afresh pair only some."""
    import random

    rng, tasks = random.Random(0), [f"t{i}" for i in range(8)]

    def run(order: list[list[str]]) -> list[dict]:
        return [{"step": step, "episodes": [{"task": t, "solved": rng.random() < 0.5, "replayed": False}
                                            for t in drawn for _ in range(2)]} for step, drawn in enumerate(order, 1)]

    epochs = []
    for _ in range(4):
        epoch = rng.sample(tasks, 8)
        epochs += [epoch[:4], epoch[4:]]
    check = task_paired_check(run(epochs), 0.25)
    assert check["steps_per_half"] == 2 and check["tasks"] == 8 and check["played"] == [8, 8]
    fresh = task_paired_check(run([rng.sample(tasks, 4) for _ in range(8)]), 0.25)
    assert fresh["tasks"] < 8 and fresh["played"] != [8, 8]  # this seed's draw: some tasks in one quarter only


def test_grpo_steps_count_each_rung_and_the_report_pools_them():
    from pdbgym.train.experiment.report import grpo_rungs
    from pdbgym.train.grpo.rollout import EpisodeSample, episode_metrics

    def sample(task: str, solved: bool, replayed: bool = False) -> EpisodeSample:
        return EpisodeSample([], [], [], [], {"instance_id": task, "final_test_passed": solved,
                                               "termination_reason": "solved" if solved else "turn_budget",
                                               "replayed": replayed})

    rungs = {"a": 0, "b": 0, "c": 1}.__getitem__
    step = episode_metrics([sample("a", True), sample("b", False), sample("c", False), sample("a", True, True)], rungs)
    assert step["episodes/rung_0/played"] == 2 and step["episodes/rung_0/solved"] == 1  # the replayed one left out
    assert step["episodes/rung_1/played"] == 1 and step["episodes/rung_1/solved"] == 0
    later = episode_metrics([sample("a", True), sample("b", True), sample("c", True)], rungs)
    table = grpo_rungs([step, step, later, later])
    assert table[0]["played"] == 8 and table[0]["solved"] == 6 and table[0]["first"] == (1, 2)
    assert table[0]["last"] == (2, 2) and 0 < table[0]["ci"][0] < 0.75 < table[0]["ci"][1] <= 1
    assert table[1]["solved"] == 2 and table[1]["played"] == 4


def test_until_stops_after_the_named_stage_and_reports_what_is_there(tmp_path, tiny_model_dir, monkeypatch):
    from typer.testing import CliRunner

    from pdbgym.cli import app

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    config, out = quick_file(tmp_path, tiny_model_dir), tmp_path / "run"
    result = CliRunner().invoke(app, ["experiment", "run", str(config), "--out", str(out), "--quick", "--until", "split"])
    assert result.exit_code == 0, result.output
    assert list(json.loads((out / "experiment.json").read_text())["stages"]) == ["tasks", "split", "report"]
    assert "[oracle]" not in result.output and (out / "report.md").is_file()
    wrong = CliRunner().invoke(app, ["experiment", "run", str(config), "--out", str(out), "--quick", "--until", "sfft"])
    assert wrong.exit_code != 0 and "sfft" in str(wrong.exception)


def test_the_grpo_minutes_cap_counts_the_kept_steps_of_earlier_invocations(tmp_path):
    from pdbgym.train.experiment.run import grpo_minutes_left

    folder = tmp_path / "grpo"
    folder.mkdir()
    rows = [{"step": step, "step_time": 60.0} for step in (1, 2, 3, 4)]  # a minute each; step 4 after the checkpoint
    (folder / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert grpo_minutes_left(10.0, folder, str(folder / "checkpoints" / "checkpoint-3")) == pytest.approx(7.0)
    assert grpo_minutes_left(10.0, folder, None) == pytest.approx(10.0)  # started over: nothing kept
    assert grpo_minutes_left(2.0, folder, str(folder / "checkpoints" / "checkpoint-3")) == pytest.approx(1e-3)
    assert grpo_minutes_left(0.0, folder, None) == 0.0  # no cap


def test_the_report_shows_tampered_and_verdict_refused_episodes_per_grpo_step_gate_and_held_out_arm(tmp_path):
    from pdbgym.evaluate.analysis import summarize
    from pdbgym.evaluate.report import machine_summary
    from pdbgym.evaluate.results import EpisodeRow
    from pdbgym.train.experiment.report import write_experiment_report

    config, out = load_experiment(REPO_FILE), tmp_path / "run"
    (out / "grpo").mkdir(parents=True)
    steps = [{"step": 1, "reward": 0.1, "episodes/solve_rate": 0.25, "episodes/tampered": 2.0, "episodes/refused": 0.0,
              "episodes/tampered_total": 2.0, "episodes/refused_total": 0.0},
             {"step": 2, "reward": 0.3, "episodes/solve_rate": 0.5, "episodes/tampered": 0.0, "episodes/refused": 3.0,
              "episodes/tampered_total": 2.0, "episodes/refused_total": 3.0}]
    (out / "grpo" / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    gate = {"checkpoint": "checkpoint-2", "step": 2, "pass_at_1": {"mean": 0.5, "ci": [0.1, 0.9]},
            "termination_reasons": {"tampered": 1, "solved": 1}, "refused": 1}
    (out / "grpo" / "gates.jsonl").write_text(json.dumps(gate) + "\n")
    # held-out arms: grpo tampered once and refused once over four episodes, base refused once
    hacked = {("grpo", "t0", 0): ("tampered", False), ("grpo", "t0", 1): ("finish_unresolved", True),
              ("base", "t1", 1): ("budget", True)}
    rows = []
    for arm in ("base", "grpo"):
        for task in ("t0", "t1"):
            for run in range(2):
                reason, refused = hacked.get((arm, task, run), ("finish_unresolved", False))
                rows.append(EpisodeRow(arm, task, run, False, reason, 3, 1.0, "x.json", grade_refused=refused))
    summary = machine_summary(summarize(rows, ["base", "grpo"], ["t0", "t1"], 2))
    (out / "eval-summary.json").write_text(json.dumps(summary))
    text = write_experiment_report(config, out, {}).read_text()
    steps_table = text.split("## GRPO steps", 1)[1].split("\n\n", 2)[1]
    assert "| step | reward | on-policy solve rate | tampered | verdict-refused | replayed |" in steps_table
    assert "| 1 | 0.100 | 25.0% | 2 | 0 | 0 |" in steps_table and "| 2 | 0.300 | 50.0% | 0 | 3 | 0 |" in steps_table
    assert ("Reward hacking: 2 on-policy episode(s) graded tampered and 3 verdict-refused" in text
            and "(tampered at step(s) 1; refused at step(s) 2)" in text)
    assert "| checkpoint-2 | 2 | 50.0% [10.0%, 90.0%] | 1 | 1 |" in text
    held_out = text.split("## Held-out test split", 1)[1]
    assert "| pass@3 | episodes | tampered | verdict-refused | valid tool calls |" in held_out
    assert "| base | 0.0% [0.0%, 65.8%] | - | 4 | 0 | 1 |" in held_out
    assert "| grpo | 0.0% [0.0%, 65.8%] | - | 4 | 1 | 1 |" in held_out


def test_training_stages_say_what_they_do_and_hide_library_future_warnings_while_they_run(tmp_path, monkeypatch):
    import warnings

    from pdbgym.train.experiment import run as run_module

    config = load_experiment(REPO_FILE, quick=True)

    def stage(name: str):
        def play(*_args: object) -> dict[str, str]:
            warnings.warn(f"{name} is deprecated", FutureWarning, stacklevel=1)
            warnings.warn(f"{name} says more", UserWarning, stacklevel=1)
            return {}
        return play

    for name in ("_tasks", "_split", "_oracle", "_sft", "_grpo"):
        monkeypatch.setattr(run_module, name, stage(name))
    monkeypatch.setattr(run_module, "write_experiment_report", lambda *_: tmp_path / "report.md")
    said: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_module.run_experiment(config, tmp_path / "run", say=said.append, until="grpo")
        warnings.warn("after the stages", FutureWarning, stacklevel=1)  # the filter was not left behind
    shown = [str(w.message) for w in caught]
    assert [m for m in shown if "deprecated" in m] == ["_tasks is deprecated", "_split is deprecated",
                                                       "_oracle is deprecated"]
    assert "_sft says more" in shown and "_grpo says more" in shown and "after the stages" in shown
    starts = [line for line in said if " started" in line]
    assert starts[:3] == ["[tasks] started", "[split] started", "[oracle] started"]
    assert starts[3].startswith("[sft] started: LoRA SFT (rank ") and "one run per step count" in starts[3]
    assert starts[4].startswith("[grpo] started: GRPO of the chosen SFT model: ")  # no choice.json: faked SFT
    assert [line.split(" in ")[0] for line in said if " done in " in line] == [
        f"[{stage}] done" for stage in ("tasks", "split", "oracle", "sft", "grpo", "report")]


def test_the_report_reads_plainly_and_the_quick_profile_says_it_is_a_smoke_test(tmp_path):
    """Facts as text, no zero-width KL interval from one task, no "-0.0%", singular counts, the smoke-test
    warning at the top of a quick run's report and none in a full run's."""
    from dataclasses import replace

    from pdbgym.evaluate.analysis import summarize
    from pdbgym.evaluate.report import machine_summary
    from pdbgym.evaluate.results import EpisodeRow
    from pdbgym.train.experiment.report import kl_cell, pct0, plural, write_experiment_report

    quick = load_experiment(REPO_FILE, quick=True)
    quick = replace(quick, eval=replace(quick.eval, runs=1))
    out = tmp_path / "run"
    (out / "grpo").mkdir(parents=True)
    # base and sft solve the same tasks: the stored base - sft is +0.0, which the report turns to sft - base
    rows = [EpisodeRow(arm, task, 0, task == "t0", "solved" if task == "t0" else "budget", 3, 1.0, "x.json")
            for arm in ("base", "sft") for task in ("t0", "t1")]
    (out / "eval-summary.json").write_text(json.dumps(machine_summary(summarize(rows, ["base", "sft"], ["t0", "t1"], 1))))
    (out / "kl.json").write_text(json.dumps({"arms": {
        "base": {"available": True, "kl_per_token": 0.869, "ci_low": 0.869, "ci_high": 0.869, "tasks": 1},
        "sft": {"available": True, "kl_per_token": 0.5, "ci_low": 0.4, "ci_high": 0.6, "tasks": 2}}}))
    state = {"stages": {"split": {"seconds": 1.0, "train": 3, "val": 1, "test": 2},
                        "oracle": {"seconds": 2.5, "train": {"episodes": 3, "solved": 3}},
                        "eval": {"seconds": 4.0, "arms": {"base": 0.5, "sft": 0.5}, "kl": True}}}
    text = write_experiment_report(quick, out, state).read_text()
    top = text.split("## Stages", 1)[0]
    assert "smoke test" in top.lower() and "nothing below is evidence about learning" in top
    stages = text.split("## Stages", 1)[1].split("\n\n", 2)[1]
    assert "| split | 1 | train: 3; val: 1; test: 2 |" in stages
    assert "| oracle | 2.5 | train: episodes 3, solved 3 |" in stages
    assert "| eval | 4 | arms: base 0.5, sft 0.5; kl: yes |" in stages
    assert "{" not in stages and '"' not in stages
    assert "0.8690 [0.8690, 0.8690]" not in text
    assert "0.8690 (no interval: it needs at least 2 tasks, 1 task scored)" in text
    assert "0.5000 [0.4000, 0.6000]" in text
    assert "-0.0%" not in text and "| sft - base | 0.0% [" in text
    assert "(1 run a task)" in text and "1 runs" not in text
    full = write_experiment_report(load_experiment(REPO_FILE), out, state).read_text()
    assert "smoke test" not in full.lower()
    assert plural(1, "task") == "1 task" and plural(2, "task") == "2 tasks" and plural(0, "run") == "0 runs"
    assert pct0(-0.0) == "0.0%" and pct0(-0.0004) == "0.0%" and pct0(-0.01) == "-1.0%" and pct0(None) == "n/a"
    assert kl_cell(None) == "-" and kl_cell({"available": False}) == "-"


def test_a_swing_of_the_whole_policy_at_one_step_is_told_apart_from_learning():
    """Every task solved more at one late step only (a swing shared by all tasks), flat otherwise: each task
    against itself reads it as a rise; steps as clusters with the task mix taken out put it in the variance."""
    import random

    rng = random.Random(0)
    tasks = [f"t{i}" for i in range(16)]
    rates = {t: 0.2 + 0.6 * i / 15 for i, t in enumerate(tasks)}

    def step(number: int, swing: float) -> dict:
        return {"step": number, "episodes": [{"task": t, "solved": rng.random() < min(1.0, rates[t] + swing),
                                              "replayed": False} for t in tasks for _ in range(4)]}

    rows = [step(n, 0.45 if n == 11 else 0.0) for n in range(1, 13)]
    paired, centred = task_paired_check(rows), step_centred_check(rows)
    assert paired["changed"] and paired["method"] == "sign-flip"
    assert centred["steps"] == [6, 6] and centred["tasks"] == 16 and centred["df"] > 4
    assert centred["ci"][0] < 0 < centred["ci"][1] and not centred["changed"]
    assert centred["diff"] == pytest.approx(paired["diff"], abs=1e-9)  # every task in every step: the same difference
    # a rise at every late step: both see it
    rising = [step(n, 0.0 if n <= 6 else 0.3) for n in range(1, 13)]
    assert step_centred_check(rising)["learned"] and task_paired_check(rising)["learned"]
    assert step_centred_check(rows[:3]) is None  # one step a half: no spread between steps


def test_a_grpo_run_whose_spread_came_from_replay_alone_is_named_so_in_the_report(tmp_path):
    """Two steps whose groups had spread only because a replayed success sat beside played failures: the
    report counts no on-policy spread, says how much came from replay, and labels the grpo arm."""
    from pdbgym.evaluate.analysis import summarize
    from pdbgym.evaluate.report import machine_summary
    from pdbgym.evaluate.results import EpisodeRow
    from pdbgym.train.experiment.report import write_experiment_report

    config, out = load_experiment(REPO_FILE), tmp_path / "run"
    (out / "grpo").mkdir(parents=True)
    steps = [{"step": s, "episodes/solve_rate": 0.0, "episodes/replayed": 1, "frac_reward_zero_std": 0.0}
             for s in (1, 2)]
    (out / "grpo" / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    episodes = [{"task": "a", "solved": True, "replayed": True}] + [{"task": "a", "solved": False, "replayed": False}] * 3
    (out / "grpo" / "outcomes.jsonl").write_text("".join(json.dumps({"step": s, "episodes": episodes}) + "\n"
                                                         for s in (1, 2)))
    rows = [EpisodeRow(arm, "t0", run, False, "finish_unresolved", 3, 1.0, "x.json") for arm in ("sft", "grpo")
            for run in range(2)]
    (out / "eval-summary.json").write_text(json.dumps(machine_summary(summarize(rows, ["sft", "grpo"], ["t0"], 2))))
    text = write_experiment_report(config, out, {}).read_text()
    assert "0 of 2 steps had reward spread among their on-policy episodes" in text
    assert "2 more steps had spread only between replayed corpus trajectories" in text
    assert "No GRPO step had reward spread among its on-policy episodes" in text
    assert "| grpo (no on-policy reward spread: imitation only) |" in text


def test_the_report_lists_each_departure_from_the_seed_recipe_with_the_files_reason(tmp_path):
    from pdbgym.reportkit import markdown
    from pdbgym.train.experiment.recipe import SEED_RECIPE
    from pdbgym.train.experiment.report import departure_blocks

    recipe = load_experiment(REPO_FILE.with_name("smollm2-seed-recipe.toml"))
    assert markdown(departure_blocks(recipe)).startswith("The settings are the seed recipe's")
    for name in ("smollm2-ladder.toml", "smollm2-ladder-short.toml"):
        config = load_experiment(REPO_FILE.with_name(name))
        text = markdown(departure_blocks(config))
        assert "## Departures from the seed recipe" in text and "no reason given" not in text
        assert "| SFT adapter | DoRA r24 | LoRA r16 |" in text and "| held-out temperature | 0.7 | 1 |" in text
        assert set(config.departures) <= set(SEED_RECIPE)
    seeds = load_experiment(REPO_FILE.with_name("smollm2-ladder-seeds.toml"))  # held out at the recipe's 0.7
    text = markdown(departure_blocks(seeds))
    assert seeds.seeds == [0, 1, 2] and "held-out temperature" not in text and "no reason given" not in text
    # a departure the file does not explain says so; a reason for no known setting is refused by name
    quiet = tmp_path / "quiet.toml"
    quiet.write_text(REPO_FILE.read_text().replace('"eval.runs" = ', '"unused" = ', 1).replace(
        '"unused" = "4 runs a task at three temperatures; 8 would double the eval stage\'s device time"\n', ""))
    assert "no reason given (add eval.runs to [departures])" in markdown(departure_blocks(load_experiment(quiet)))
    typo = tmp_path / "typo.toml"
    typo.write_text(REPO_FILE.read_text().replace('"eval.runs" = ', '"eval.run" = ', 1))
    with pytest.raises(ExperimentError, match=r"\[departures\].*eval.run"):
        load_experiment(typo)


def test_the_repository_files_hold_other_task_sets_out_whole_and_split_rung_0_as_before(tmp_path):
    """The shipped files' held-out split: 24 ladder0 tasks dealt as before the other sets were added, and every
    task of ladder1, symptom and the two hand-written suites, none of them in train or val; the report's table
    by task set tells each set apart."""
    from pdbgym.tasks.splits import check_splits, load_splits, make_splits
    from pdbgym.train.experiment.run import run_experiment

    config = load_experiment(REPO_FILE)
    assert config.split.test_only == ["ladder1", "symptom", "builtin", "regression"]
    out = tmp_path / "run"
    run_experiment(config, out, until="split", say=lambda _: None)
    sets = json.loads((out / "tasks" / "sets.json").read_text())
    splits = load_splits(out / "splits.json")
    assert check_splits(splits) == []
    in_split = {name: {sets[item["instance_id"]] for item in items} for name, items in splits.items()}
    assert in_split["train"] == in_split["val"] == {"ladder0"}
    assert in_split["test"] == {"ladder0", "ladder1", "symptom", "builtin", "regression"}
    counts = {name: sum(sets[item["instance_id"]] == name for item in splits["test"]) for name in in_split["test"]}
    assert counts == {"ladder0": 24, "ladder1": 12, "symptom": 18, "builtin": 21, "regression": 16}
    alone = tmp_path / "ladder0"
    alone.mkdir()
    for instance_id in (i for i, name in sets.items() if name == "ladder0"):
        (alone / instance_id).symlink_to(out / "tasks" / "all" / instance_id)
    before = make_splits(alone, 0.15, 0.25, seed=0, stratify="rung")["splits"]
    for name in ("train", "val", "test"):
        assert [i["instance_id"] for i in before[name]] == \
            [i["instance_id"] for i in splits[name] if sets[i["instance_id"]] == "ladder0"]


def test_a_held_out_set_must_be_a_task_set_of_the_file(tmp_path):
    path = tmp_path / "experiment.toml"
    text = REPO_FILE.read_text()
    path.write_text(text.replace('test_only = ["ladder1", "symptom", "builtin", "regression"]', 'test_only = ["ladder2"]'))
    with pytest.raises(ExperimentError, match="ladder2"):
        load_experiment(path)
    path.write_text(text.replace('test_only = ["ladder1", "symptom", "builtin", "regression"]',
                                 'test_only = ["ladder0", "ladder1", "symptom", "builtin", "regression"]'))
    with pytest.raises(ExperimentError, match="leave one to train on"):
        load_experiment(path)


def test_the_report_tells_each_task_set_apart_with_its_rungs(tmp_path):
    """Held-out pass@1 per family and suite of [tasks], each labelled with its rungs and whether it was held out
    whole; the table by rung pools ladder1 and symptom (both rung 1), the table by task set does not."""
    import shutil

    from pdbgym.evaluate.results import EpisodeRow, ResultsStore
    from pdbgym.tasks.families import write_family
    from pdbgym.tasks.suites import resolve_tasks
    from pdbgym.train.experiment.report import by_rung, by_task_set

    out = tmp_path / "run"
    test = out / "tasks" / "test"
    sets = {folder.name: family for family in ("ladder0", "ladder1", "symptom")
            for folder in write_family(family, 2, test, seed=1)}
    regression = resolve_tasks("regression")[:2]
    for task in regression:
        shutil.copytree(task.path, test / task.path.name)
        sets[task.instance_id] = "regression"
    (out / "tasks" / "sets.json").write_text(json.dumps(sets))
    (out / "eval").mkdir()
    ResultsStore(out / "eval").append(
        EpisodeRow(arm, instance_id, 0, arm == "sft" and name != "symptom", "solved", 7, 1.0, "x.json")
        for arm in ("base", "sft") for instance_id, name in sets.items())
    table = by_task_set(out, ["ladder1", "symptom", "regression"])
    assert set(table["sft"]) == {"ladder0 (rung 0)", "ladder1 (rung 1; held out whole)",
                                 "symptom (rung 1; held out whole)", "regression (rung 1; held out whole)"}
    assert table["sft"]["symptom (rung 1; held out whole)"]["mean"] == 0.0
    assert table["sft"]["ladder1 (rung 1; held out whole)"]["mean"] == 1.0
    assert all(cell["tasks"] == 2 for cell in table["sft"].values())
    assert by_rung(out)["sft"][1]["tasks"] == 6  # pooled by rung: ladder1, symptom and regression together


def test_a_pair_whose_every_task_differs_alike_says_so_beside_its_interval():
    """GRPO and sft-matched scoring the same on every task (seed 2 of the second H100 run): the paired
    comparison's fallback interval is named as such, and a reversed comparison is turned round."""
    from pdbgym.train.experiment.report import _pairs

    summary = {"comparisons": [
        {"arm_a": "sft-matched", "arm_b": "grpo", "mean_diff": 0.0, "ci": [-0.139, 0.139], "n_tasks": 81,
         "ci_method": "newcombe"},
        {"arm_a": "sft-best", "arm_b": "grpo", "mean_diff": -0.003, "ci": [-0.009, 0.0], "n_tasks": 81,
         "ci_method": "sign-flip"}]}
    (matched, best) = _pairs(summary, (("grpo", "sft-matched"), ("grpo", "sft-best")))
    assert matched[2].startswith("0.0% [-13.9%, 13.9%]; every task's difference is the same")
    assert best[2] == "0.3% [0.0%, 0.9%]" and best[3] == 81
