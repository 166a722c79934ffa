"""The demo report's builder on campaign folders shaped like a real demo's (issue 25): episodes.jsonl rows and
text-format transcripts as `pdbgym demo` writes them, the summary from the real `summarize`, the KL file in
`oracle_kl`'s shape (figures of a real run). No model, no episode is run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pdbgym.evaluate import stats
from pdbgym.evaluate.analysis import summarize
from pdbgym.evaluate.results import EpisodeRow, ResultsStore
from pdbgym.train.demo.conclusion import what_this_run_shows
from pdbgym.train.demo.config import DemoConfig
from pdbgym.train.demo.report import tool_call_validity, write_demo_report

ARMS = {"base": "embedded", "sft": "/home/u/.pdbgym/merged/8a6e01", "oracle": "scripted"}
TASKS = [f"builtin__task-{i}" for i in range(5)]
SYSTEM = "You are debugging a Python project. A test fails; find the bug in the code and fix it."


def call(command: str) -> str:
    """An assistant turn as the text tool-call format writes it (what the demo's SFT model sends)."""
    return "```tool\n" + json.dumps({"tool": "pdb", "args": {"command": command}}) + "\n```"


def write_campaign(folder: Path, turns: dict[str, list[list[str]]], solved: dict[str, int]) -> list[EpisodeRow]:
    """arm -> one list of assistant turns per task; the first ``solved[arm]`` tasks are solved."""
    store = ResultsStore(folder)
    store.open({"arms": ARMS, "runs": 1})
    rows = []
    for arm, episodes in turns.items():
        for index, (task, said) in enumerate(zip(TASKS, episodes, strict=True)):
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "A test fails."}]
            for text in said:
                messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "(Pdb)"}]
            path = store.transcript_path(arm, task, 0)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"instance_id": task, "sample_idx": 0, "policy": ARMS[arm],
                                        "tool_format": "text", "messages": messages}))
            won = index < solved.get(arm, 0)
            rows.append(EpisodeRow(arm, task, 0, won, "solved" if won else "budget", len(said), 1.0,
                                   str(path.relative_to(folder))))
    store.append(rows)
    return rows


# The demo's run of docs/benchmarks.md: base writes prose, sft sends the same call up to 8 times in a row,
# the oracle solves every task; KL of that run.
REAL_TURNS = {
    "base": [["I will look at the code first."] * 3] * 5,
    "sft": [[call("c")] * 8, [call("b tests/test_a.py:13"), call("c"), "Let me", call("n")],
            [call("l")] * 3 + ["oops"], [call("w"), call("p x")], [call("c"), call("c"), "hmm"]],
    "oracle": [[call("b f.py:3"), call("c"), call("p x")]] * 5,
}
REAL_KL = {"cache": "cache-test", "records": 5, "max_ids": 1024, "metric": "kl_teacher_student/k1/token_mean",
           "arms": {"base": {"available": True, "path": "m", "kl_per_token": 1.4223, "ci_low": 1.3546,
                             "ci_high": 1.5035, "tasks": 5, "tokens": 262},
                    "sft": {"available": True, "path": "s", "kl_per_token": 0.4060, "ci_low": 0.3255,
                            "ci_high": 0.4883, "tasks": 5, "tokens": 262},
                    "oracle": {"available": False, "reason": "the scripted oracle replays the task's reference fix"}}}


@pytest.fixture
def real(tmp_path):
    rows = write_campaign(tmp_path / "eval", REAL_TURNS, {"oracle": 5})
    return tmp_path, summarize(rows, ARMS, TASKS, 1), tool_call_validity(tmp_path / "eval", ARMS)


def test_valid_call_rate_has_an_interval_clustered_by_episode(real):
    _, _, validity = real
    sft = validity["sft"]
    shares = [1.0, 3 / 4, 3 / 4, 1.0, 2 / 3]  # each episode's valid turns / turns
    assert (sft["turns"], sft["valid"], sft["episodes_with_valid"]) == (21, 18, 5)
    assert sft["rate"] == pytest.approx(18 / 21)  # pooled, as before
    assert sft["episode_rate"] == stats.estimate_mean(np.array(shares), max_n=21).to_dict()
    assert sft["longest_repeat"] == 8 and validity["oracle"]["longest_repeat"] == 1
    # Eight copies of one call count as one episode, not as eight independent turns: the interval is wider
    # than a Wilson interval that takes the 21 turns as independent trials.
    low, high = sft["episode_rate"]["ci"]
    turn_low, turn_high = stats.wilson_interval(18 / 21, 21)
    assert high - low > turn_high - turn_low
    # No valid call at all still has an interval (Wilson at 0/5 episodes), not the point [0, 0].
    base = validity["base"]["episode_rate"]
    assert base["mean"] == 0 and base["ci"][0] == 0 and base["ci"][1] > 0.3
    assert validity["sft"]["per_task_rate"] == dict(zip(TASKS, shares, strict=True))


def test_the_conclusion_states_what_the_real_run_shows(real):
    _, summary, validity = real
    text = " ".join(what_this_run_shows(ARMS, summary, validity, REAL_KL))
    assert "base 0 of 5, sft 0 of 5, oracle 5 of 5" in text
    assert "For base and sft, 0 solved is no evidence about solving ability" in text
    assert "reaches 43.4%" in text  # the upper end of pass@1's interval at 0 of 5
    # The same difference, in the same direction, as the paired-comparison table's row (base - sft).
    assert "Pass@1, base - sft: +0.0 [-43.4, +43.4] points" in text and "no detectable change" in text
    assert "sft minus base: +0.0" not in text
    assert "SFT raised it" in text and "sft sent one call 8 times in a row" in text
    assert "KL to the teacher fell from 1.4223 [1.3546, 1.5035] (base) to 0.4060" in text
    assert "did not turn into more solved episodes here (sft 0, base 0)" in text
    assert "less than about 89 points" in text


def test_the_conclusion_changes_with_the_numbers(tmp_path):
    """Another run: sft solves 3 of 5 and writes as many valid calls as base; KL intervals overlap."""
    same = [[call("c"), call("n"), "x"]] * 5
    rows = write_campaign(tmp_path / "eval", {"base": same, "sft": same, "oracle": REAL_TURNS["oracle"]},
                          {"sft": 3, "oracle": 5})
    summary = summarize(rows, ARMS, TASKS, 1)
    kl = json.loads(json.dumps(REAL_KL))
    kl["arms"]["sft"].update(kl_per_token=1.40, ci_low=1.33, ci_high=1.47)
    text = " ".join(what_this_run_shows(ARMS, summary, tool_call_validity(tmp_path / "eval", ARMS), kl))
    assert "base 0 of 5, sft 3 of 5" in text
    assert "For base, 0 solved is no evidence" in text and "For base and sft" not in text
    assert "Pass@1, base - sft: -60.0" in text and "sft minus base: +60.0" not in text
    assert ("SFT raised it" in text) == (summary["comparisons"][0]["ci"][1] < 0)
    assert "paired over 5 task(s): the interval holds 0: no detectable change" in text  # same valid calls
    assert "the intervals overlap, so this run shows no clear change" in text and "fell" not in text
    assert "times in a row" not in text and "did not turn into more solved" not in text


def test_no_finished_task_says_so_instead_of_concluding(tmp_path):
    summary = summarize([], ARMS, TASKS, 1)
    assert what_this_run_shows(ARMS, summary, {}, None) == [
        "No held-out task has finished in every arm yet, so this run shows nothing about the arms; rerun "
        "`pdbgym demo` with the same --out to play the missing episodes."]


def test_report_opens_with_the_conclusion_and_shows_the_table_its_sd0_notes_are_about(real):
    out, summary, _ = real
    config = DemoConfig(out=out)
    record = {"recipe": {"rank": 16, "lora_alpha": 32, "target_modules": ["q_proj"], "lr": 1e-3}, "steps": 12,
              "best_val_loss": 0.42, "best_step": 12, "corpus": {"val_tasks": ["a", "b", "c"]}}
    corpus = {"records_read": 16, "examples_kept": 16, "tokens": 16384, "loss_tokens": 842}
    caches = {"train": {"episodes_run": 16}, "test": {"episodes_run": 5}}
    phases = {name: {"seconds": 1.0, "cpu_seconds": 1.0, "reused": False, "first_seconds": 1.0}
              for name in ("split", "teacher", "corpus", "sft", "kl", "eval")}
    page = write_demo_report(config, out, ARMS, summary, record, corpus, caches, REAL_KL, phases)
    text = (out / "demo_report.md").read_text()
    assert text.index("## What this run shows") < text.index("## The run")
    assert "0 solved is no evidence about solving ability" in text
    assert "per-episode rate % [95% CI, by episode]" in text
    # Every pair is sd 0 here (each task differs alike): one note naming the pairs, beside their table.
    assert "## Paired comparisons (pass@1, A - B)" in text
    assert "| sft | oracle | -100.0 \u2020 | [-100.0, -38.6] |" in text  # marked: it fell back to sd 0
    assert "such rows are marked \u2020 after the mean diff" in text
    assert "| | |" not in text and "| what | value |" in text  # the run's table has a header
    assert text.count("(sd 0)") == 2  # the table's explanation and the one note below
    assert "base - sft, base - oracle, sft - oracle: paired comparison: every task has the same difference" in text
    report = json.loads((out / "demo_report.json").read_text())
    assert report["conclusion"] and "Paired comparisons (pass@1, A - B)" in report["tables"]
    assert 'id="conclusion"' in page.read_text()


def test_how_episodes_ended_counts_verdict_refused_episodes_beside_the_reasons(tmp_path):
    """A verdict-refused episode is no termination reason: its row joins the table only when an arm has one."""
    from dataclasses import replace

    from pdbgym.train.demo.report import _tables

    rows = write_campaign(tmp_path / "eval", REAL_TURNS, {"oracle": 5})
    assert not any(r[0] == "verdict-refused" for r in _tables(ARMS, summarize(rows, ARMS, TASKS, 1), {}, None)[
        "How episodes ended"])
    rows = [replace(r, grade_refused=True) if r.arm == "sft" and r.instance_id in TASKS[:2] else r for r in rows]
    ended = _tables(ARMS, summarize(rows, ARMS, TASKS, 1), {}, None)["How episodes ended"]
    refused = next(r for r in ended if r[0] == "verdict-refused")
    assert ended[0][2:] == ["base", "sft", "oracle"] and refused[2:] == ["0", "2", "0"]


def test_headline_matches_the_table_row_and_the_mark_note_only_comes_with_a_marked_row(tmp_path):
    """Tasks that differ unlike (sd > 0): no row falls back to the conservative sd, so none is marked and no
    note promises a mark; the headline's pass@1 difference is the table's base - sft row, sign and all."""
    from pdbgym.train.demo.report import _comparison_notes, _tables

    same = [[call("c"), call("n"), "x"]] * 5
    rows = write_campaign(tmp_path / "eval", {"base": same, "sft": same, "oracle": REAL_TURNS["oracle"]},
                          {"sft": 3, "oracle": 5})
    summary = summarize(rows, ARMS, TASKS, 1)
    table = _tables(ARMS, summary, {}, None)["Paired comparisons (pass@1, A - B)"]
    base_sft = next(r for r in table[1:] if r[:2] == ["base", "sft"])
    assert base_sft[2] == "-60.0"  # no mark: the per-task differences vary
    text = " ".join(what_this_run_shows(ARMS, summary, {}, None))
    assert f"Pass@1, base - sft: {base_sft[2]} {base_sft[3]} points" in text
    # base - oracle differs alike on every task (sd 0): that row alone is marked, and the note explains it.
    assert [r[:2] for r in table[1:] if "\u2020" in r[2]] == [["base", "oracle"]]
    assert "such rows are marked \u2020" in " ".join(_comparison_notes(summary))
    # Without that row no row carries a mark, and no note promises one.
    unmarked = {**summary, "comparisons": [c for c in summary["comparisons"] if not c.get("warning")],
                "warnings": [w for w in summary["warnings"] if not w.startswith("base - oracle:")]}
    assert unmarked["comparisons"] and not any("\u2020" in r[2] for r in _tables(ARMS, unmarked, {}, None)[
        "Paired comparisons (pass@1, A - B)"][1:])
    notes = " ".join(_comparison_notes(unmarked))
    assert "marked" not in notes and "(sd 0)" not in notes
    assert notes == "Paired comparisons use per-task differences of pass@1."
