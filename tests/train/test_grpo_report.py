"""The GRPO training report and progress: a real `pdbgym train grpo` run on builtin tasks (real pdb episodes,
a tiny random model), its report's files, plots, gate rows tied to checkpoint folders and transcripts, the
progress lines of every phase, a report re-created from a killed run's folder, and the page in Chromium."""

import json
import re
import shutil
from pathlib import Path

import pytest
from browser import FIRST_LINE_COLOURS, dump_dom, needs_chromium, pixels_near, screenshot
from homefixtures import fresh_home
from htmlrows import assert_html_holds_markdown_tables
from typer.testing import CliRunner

TRAIN_TASK, VAL_TASK = "builtin__calc-lexer-hang", "builtin__billing-invoice-totals"
PANELS = {"reward", "solve_rate", "kl", "beta", "turn_budget", "loss", "bc_weight", "episodes"}
GATE_TABLE = "Val gate (one row per checkpoint)"


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_dir):
    from pdbgym.cli import app

    root = tmp_path_factory.mktemp("grpo-report")
    out = root / "run"
    env = {"PDBGYM_HOME": str(fresh_home(root / "home")), "PDBGYM_PROGRESS_HEARTBEAT_S": "1"}
    result = CliRunner().invoke(app, [
        "train", "grpo", "--policy", str(tiny_model_dir), "--tasks", TRAIN_TASK, "--val-tasks", VAL_TASK,
        "--out", str(out), "--group", "2", "--steps", "2", "--save-steps", "1", "--val-runs", "2", "--val-k", "2",
        "--max-new-tokens", "6", "--max-context-tokens", "4096", "--curriculum", "fixed", "--budget-start", "2",
        "--budget-end", "2", "--device", "cpu", "--json"], env=env)
    assert result.exit_code == 0, result.output
    return out, result.output, root


def _report(out: Path) -> dict:
    return json.loads((out / "training_report.json").read_text())


@pytest.mark.slow
def test_every_phase_shows_progress(run):
    _, output, _ = run
    lines = output.splitlines()
    # not a terminal: plain lines; each phase ends with its full count
    for done in ("[step 1 rollouts] 2/2", "[step 2 rollouts] 2/2", "[updates] 2/2",
                 "[val gate checkpoint-1] 2/2", "[val gate checkpoint-2] 2/2"):
        assert any(line.startswith(done) for line in lines), (done, output[-3000:])
    # episodes were counted one by one as they finished (a line with 1 of 2 done, or the bar jumped)
    assert any(line.startswith("[updates] 0/2") for line in lines)
    assert "report: " in output and output.rstrip().endswith("}")


@pytest.mark.slow
def test_report_files_plots_and_gate_rows_tied_to_checkpoints(run):
    out, _, _ = run
    report = _report(out)
    for suffix in ("html", "md", "json"):
        assert (out / f"training_report.{suffix}").is_file()
    assert PANELS <= set(report["plots"])
    for name, file in report["plots"].items():
        assert (out / file).is_file() and (out / file).stat().st_size > 5_000, name
    markdown = (out / "training_report.md").read_text()
    for file in report["plots"].values():
        assert f"]({file})" in markdown
    assert_html_holds_markdown_tables(markdown, (out / "training_report.html").read_text())
    record = json.loads((out / "grpo_run.json").read_text())
    gates = report["tables"][GATE_TABLE]
    assert [g["step"] for g in gates] == [1, 2]
    for row in gates:
        link = row["checkpoint"]
        assert link["href"] == f"checkpoints/checkpoint-{row['step']}" and (out / link["href"]).is_dir()
        assert len(row["transcripts"]) == 2  # --val-runs 2 on one val task, each a saved file
        for transcript in row["transcripts"]:
            saved = json.loads((out / transcript["href"]).read_text())
            assert saved["instance_id"] == VAL_TASK
            assert transcript["text"] == ("✓" if saved["final_test_passed"] else "✗")
        assert row["val pass@1 % [95% CI]"].startswith("0.0 [")  # a random model solves nothing
    assert [row["chosen"] for row in gates].count("yes: adapter/") == 1
    chosen = next(row for row in gates if row["chosen"])
    assert chosen["checkpoint"]["href"].endswith(record["chosen"])
    assert report["summary"]["chosen checkpoint"] == record["chosen"]
    # both gates score 0 (a tie): the ledger must record the checkpoint that became the adapter
    assert [row["ledger chose"] for row in gates] == ["yes" if row["chosen"] else "" for row in gates]
    ledger_line = report["summary"]["selection ledger"]
    assert ledger_line.startswith(f"{record['chosen']} chosen among 2 candidates on split val") and "differs" not in ledger_line


@pytest.mark.slow
def test_step_rows_carry_their_numbers_weights_and_episodes(run):
    out, _, _ = run
    report = _report(out)
    logged = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    steps = report["tables"]["Steps"]
    assert [s["step"] for s in steps] == [1, 2]
    for row, raw in zip(steps, logged, strict=True):
        assert row["reward"] == raw["reward"] and row["KL"] == raw["kl"] and row["beta"] == raw["beta"]
        assert raw["episodes/solve_rate"] == 0.0 and raw["episodes/tampered"] == 0 and raw["episodes/replayed"] == 0
        assert raw["episodes/refused"] == 0 and row["verdict-refused"] == 0
        assert row["weights after the step"]["href"] == f"checkpoints/checkpoint-{row['step']}"
        assert len(row["episodes"]) == 2 and all((out / e["href"]).is_file() for e in row["episodes"])
    assert report["summary"]["status"].startswith("finished: 2")


@pytest.mark.slow
def test_report_of_a_killed_run_folder(run, tmp_path):
    """A kill leaves no grpo_run.json, maybe a torn last line: the report says so and keeps what was logged."""
    from pdbgym.cli import app

    out, _, root = run
    killed = tmp_path / "killed"
    shutil.copytree(out, killed, ignore=shutil.ignore_patterns("training_report.*", "*.png"))
    for gone in ("grpo_run.json", "adapter", "final", "checkpoints/checkpoint-2"):
        path = killed / gone
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    with open(killed / "steps.jsonl", "a") as handle:
        handle.write('{"step": 3, "rew')
    result = CliRunner().invoke(app, ["train", "report", str(killed)], env={"PDBGYM_HOME": str(fresh_home(root / "home"))})
    assert result.exit_code == 0, result.output
    report = _report(killed)
    assert report["summary"]["status"].startswith("not finished") and report["summary"]["unreadable lines skipped"] == 1
    steps = report["tables"]["Steps"]
    assert steps[0]["weights after the step"]["href"] == "checkpoints/checkpoint-1"
    assert steps[1]["weights after the step"] == "not saved yet"  # its checkpoint was lost with the kill
    assert report["tables"][GATE_TABLE][1]["checkpoint"] == "checkpoints/checkpoint-2 (folder gone)"
    assert PANELS <= set(report["plots"])


def test_report_of_a_folder_without_a_run_is_refused(tmp_path):
    from pdbgym.cli import app

    result = CliRunner().invoke(app, ["train", "report", str(tmp_path)])
    assert result.exit_code != 0
    assert "holds no GRPO run" in str(result.exception) + result.output


def test_per_step_counts_come_from_running_totals_when_only_totals_were_logged():
    from pdbgym.train.grpo.report import _with_counts

    rows = [{"step": 2, "episodes/tampered_total": 3.0}, {"step": 1, "episodes/tampered_total": 1.0},
            {"step": 4, "episodes/tampered_total": 7.0}, {"step": 5, "episodes/tampered_total": 7.0}]
    counts = [r.get("episodes/tampered") for r in _with_counts(rows)]
    assert counts == [1.0, 2.0, None, 0.0]  # step 3 missing: step 4's own count is unknown


@pytest.mark.slow
@needs_chromium
def test_report_renders_in_chromium_with_the_plots_visible(run, tmp_path):
    out, _, _ = run
    page = out / "training_report.html"
    dom = dump_dom(page, tmp_path)
    for name in PANELS:
        assert f'id="plot-{name}"' in dom, name
    assert dom.count("<img") == len(_report(out)["plots"])
    for href in re.findall(r'href="([^"]+)"', dom):
        assert (out / href).exists(), href
    shot = screenshot(page, tmp_path, 1400)
    for colour in FIRST_LINE_COLOURS:  # the total reward and the outcome term are on screen
        assert pixels_near(shot, colour) > 20, colour


@pytest.mark.slow
def test_anchor_and_replay_run_reports_its_loss_terms_and_replayed_counts(tmp_path, monkeypatch):
    """The library path: train_grpo(progress=GRPOProgress) with a play function that has no per-episode hook
    (each rollout bar still ends full), then write_grpo_report on the folder."""
    import io
    import sys

    from rich.console import Console

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from grpo_toy import make_toy_model, make_toy_tasks, toy_config, toy_play
    from test_grpo_anchor_replay import _toy_corpus

    from pdbgym.progress import progress
    from pdbgym.train.grpo.progress import GRPOProgress
    from pdbgym.train.grpo.report import write_grpo_report
    from pdbgym.train.grpo.run import train_grpo
    from pdbgym.train.grpo.schedules import anchor_weight, replayed_per_group

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    model, tasks = make_toy_model(tmp_path / "toy-model"), make_toy_tasks(tmp_path / "toy-tasks")
    corpus = _toy_corpus(tmp_path / "corpus", model)
    out = tmp_path / "run"
    config = toy_config(out, model, tasks, steps=3, save_steps=3, anchor_data=corpus, anchor_weight=0.5,
                        anchor_decay_steps=4, replay_data=corpus, replay_fraction=0.5, replay_decay_steps=4)
    log = io.StringIO()
    with progress(Console(file=log, width=200), heartbeat_s=1.0) as bars:
        train_grpo(config, play=toy_play, progress=GRPOProgress(bars, out / "episodes"))
    lines = log.getvalue().splitlines()
    for step in range(3):  # two groups of 8 a step, the replayed slots not played
        played = 2 * 8 - sum(replayed_per_group(step, 8, 2, 0.5, 4))
        assert any(line.startswith(f"[step {step + 1} rollouts] {played}/{played}") for line in lines), lines
    assert any(line.startswith("[updates] 3/3") for line in lines)
    report = json.loads(write_grpo_report(out).with_suffix(".json").read_text())
    steps = report["tables"]["Steps"]
    for row in steps:
        assert row["replayed"] == sum(replayed_per_group(row["step"] - 1, 8, 2, 0.5, 4))
        assert row["bc/weight"] == pytest.approx(anchor_weight(row["step"] - 1, 0.5, 4)) and row["bc/nll"] > 0
        assert row["rl_loss"] == pytest.approx(row["loss"] - row["bc/weight"] * row["bc/nll"])
        assert row["episodes"] == "not kept"  # the toy play function does not report its episodes
    assert [s["replayed"] for s in steps][0] > 0 and report["summary"]["replayed episodes (total)"] == sum(
        s["replayed"] for s in steps)
    loss_panel = next(p for p in report["panels"] if p["name"] == "loss")
    assert loss_panel["keys"] == ["loss", "rl_loss", "bc/nll"]
    assert report["summary"]["selection ledger"].startswith("no val gate")


def test_a_step_played_again_after_a_resume_replaces_its_transcripts_and_every_bar_ends(tmp_path):
    import io

    from rich.console import Console

    from pdbgym.progress import progress
    from pdbgym.train.grpo.progress import GRPOProgress

    stale = tmp_path / "episodes" / "step-000003" / "0000-old.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")  # written by the killed run before its last checkpoint
    log = io.StringIO()
    with progress(Console(file=log, width=200), heartbeat_s=1.0) as bars:
        hooks = GRPOProgress(bars, tmp_path / "episodes")
        with hooks.phase("rollouts", 3, 4):
            pass  # a play function that reports no episode
        with hooks.phase("val gate", 3, 0):
            pass
    assert not stale.exists() and stale.parent.is_dir()
    assert (tmp_path / "episodes" / "gate-checkpoint-3").is_dir()
    lines = log.getvalue().splitlines()
    assert any(line.startswith("[step 3 rollouts] 4/4") for line in lines)
    assert any(line.startswith("[val gate checkpoint-3] 0/0") for line in lines)
    assert len(lines) == 4  # each phase: its start and its end, no heartbeat after the end


def _outcome(reason: str, transcript_env: dict | None):
    from types import SimpleNamespace

    from pdbgym.agent.loop import EpisodeOutcome

    record = SimpleNamespace(instance_id="t", tokens=[1, 2, 3], prompt_len=1, rollout_log_probs=[-0.5, 0.0],
                             loss_mask=[1, 0])
    transcript = {"termination_reason": reason, "final_test_passed": False, "actions_used": 1, "messages": [],
                  "env": transcript_env}
    return EpisodeOutcome(record, transcript, 0.1, 0.2, 0.3)  # type: ignore[arg-type]


def test_a_refused_verdict_is_a_sample_fact_counted_per_step_apart_from_tampered():
    """grading["refused"] non-empty and not tampered: verdict-refused; a tampered episode counts as tampered
    only; a grading without the key (or no grading at all) is neither; replayed samples are not counted."""
    from pdbgym.train.corpus.example import Example
    from pdbgym.train.grpo.data import replay_sample
    from pdbgym.train.grpo.rollout import episode_metrics, sample_from_outcome

    def grading(**keys):
        return {"result": {"grading": {"tampered": [], **keys}}}

    samples = [sample_from_outcome(o, "text") for o in (
        _outcome("finish_unresolved", grading(refused=["killed by signal 9"])),
        _outcome("budget", grading(refused=["no pytest closing line"])),
        _outcome("tampered", grading(tampered=["a forged end record"], refused=["killed by signal 9"])),
        _outcome("finish_unresolved", grading()),  # an env without the key: []
        _outcome("other", None))]  # no grading (the episode ended before it)
    assert [s.facts["grade_refused"] for s in samples] == [True, True, False, False, False]
    replayed = replay_sample(Example("t", "d", 0, "test", True, [1, 2, 3], [0, 1, 1]))
    assert replayed.facts["grade_refused"] is False
    metrics = episode_metrics([*samples, replayed])
    assert metrics["episodes/tampered"] == 1.0 and metrics["episodes/refused"] == 2.0
    assert metrics["episodes/replayed"] == 1.0


def test_the_report_shows_tampered_and_verdict_refused_episodes_per_step_in_total_and_at_the_gate(tmp_path):
    """Step 1 logged its counts, step 2 only the running totals (its counts derived); the gate counted a refused
    verdict; a refused episode's transcript is marked ?, a tampered one !."""
    from pdbgym.train.grpo.report import write_grpo_report
    from pdbgym.train.grpo.valgate import append_gate, gate_on_val

    steps = [{"step": 1, "reward": 0.1, "episodes/solve_rate": 0.0, "episodes/tampered": 1.0, "episodes/refused": 0.0,
              "episodes/replayed": 0.0, "episodes/tampered_total": 1.0, "episodes/refused_total": 0.0},
             {"step": 2, "reward": 0.2, "episodes/solve_rate": 0.5, "episodes/tampered_total": 1.0,
              "episodes/refused_total": 2.0}]
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    val = [type("Task", (), {"instance_id": "v"})()]
    facts = iter([{"final_test_passed": True, "termination_reason": "solved"},
                  {"final_test_passed": False, "termination_reason": "finish_unresolved", "grade_refused": True}])
    append_gate(tmp_path / "gates.jsonl", gate_on_val(lambda tasks: [next(facts) for _ in tasks], val, 2, 2, 2,
                                                      "checkpoint-2"))
    episodes = tmp_path / "episodes" / "step-000002"
    episodes.mkdir(parents=True)
    for name, reason, graded in (("0.json", "tampered", {"tampered": ["forged"], "refused": ["killed"]}),
                                 ("1.json", "finish_unresolved", {"tampered": [], "refused": ["killed"]}),
                                 ("2.json", "finish_unresolved", {"tampered": []})):
        (episodes / name).write_text(json.dumps({"termination_reason": reason, "final_test_passed": False,
                                                 "env": {"result": {"grading": graded}}}))
    write_grpo_report(tmp_path)
    report = _report(tmp_path)
    rows = report["tables"]["Steps"]
    assert [(r["tampered"], r["verdict-refused"]) for r in rows] == [(1.0, 0.0), (0.0, 2.0)]
    assert [e["text"] for e in rows[1]["episodes"]] == ["!", "?", "✗"]
    assert report["summary"]["tampered episodes (total)"] == 1
    assert report["summary"]["verdict-refused episodes (total)"] == 2
    assert report["tables"][GATE_TABLE][0]["ended"] == "finish_unresolved 1, solved 1; verdict-refused 1"
    panel = next(p for p in report["panels"] if p["name"] == "episodes")
    assert panel["keys"] == ["episodes/tampered", "episodes/refused", "episodes/replayed"]
    markdown = (tmp_path / "training_report.md").read_text()
    assert "verdict-refused" in markdown and "verdict-refused episodes (total)" in markdown
    assert "verdict-refused" in (tmp_path / "training_report.html").read_text()
