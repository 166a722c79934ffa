"""The experiment report's "What this run shows": each sentence follows the numbers of the run, in the
direction of the evaluation report's own rows, and says what they do not show."""

from __future__ import annotations

import json

from campaignfixtures import ARMS, REAL_KL, REAL_TURNS, TASKS, call, write_campaign

from pdbgym.evaluate.analysis import summarize
from pdbgym.evaluate.arm_figures import tool_call_validity
from pdbgym.train.experiment.conclusion import what_this_run_shows


def test_the_conclusion_states_what_the_real_run_shows(tmp_path):
    rows = write_campaign(tmp_path / "eval", REAL_TURNS, {"oracle": 5})
    summary = summarize(rows, ARMS, TASKS, 1)
    text = " ".join(what_this_run_shows(ARMS, summary, tool_call_validity(tmp_path / "eval", ARMS), REAL_KL))
    assert "base 0 of 5, sft-best 0 of 5, oracle 5 of 5" in text
    assert "For base and sft-best, 0 solved is no evidence about solving ability" in text
    assert "reaches 43.4%" in text  # the upper end of pass@1's interval at 0 of 5
    # The same difference, in the same direction, as the paired-comparison row (base - sft-best).
    assert "Pass@1, base - sft-best: +0.0 [-43.4, +43.4] points" in text and "no detectable change" in text
    assert "SFT raised it" in text and "sft-best sent one call 8 times in a row" in text
    assert "KL to the oracle fell from 1.4223 [1.3546, 1.5035] (base) to 0.4060" in text
    assert "did not turn into more solved episodes here (sft-best 0, base 0)" in text
    assert "less than about 89 points" in text


def test_the_conclusion_changes_with_the_numbers(tmp_path):
    """Another run: the SFT model solves 3 of 5 and writes as many valid calls as base; KL intervals overlap."""
    same = [[call("c"), call("n"), "x"]] * 5
    rows = write_campaign(tmp_path / "eval", {"base": same, "sft-best": same, "oracle": REAL_TURNS["oracle"]},
                          {"sft-best": 3, "oracle": 5})
    summary = summarize(rows, ARMS, TASKS, 1)
    kl = json.loads(json.dumps(REAL_KL))
    kl["arms"]["sft-best"].update(kl_per_token=1.40, ci_low=1.33, ci_high=1.47)
    text = " ".join(what_this_run_shows(ARMS, summary, tool_call_validity(tmp_path / "eval", ARMS), kl))
    assert "base 0 of 5, sft-best 3 of 5" in text
    assert "For base, 0 solved is no evidence" in text and "For base and sft-best" not in text
    assert "Pass@1, base - sft-best: -60.0" in text
    assert ("SFT raised it" in text) == (summary["comparisons"][0]["ci"][1] < 0)
    assert "paired over 5 task(s): the interval holds 0: no detectable change" in text  # same valid calls
    assert "the intervals overlap, so this run shows no clear change" in text and "fell" not in text
    assert "times in a row" not in text and "did not turn into more solved" not in text


def test_no_finished_task_says_so_instead_of_concluding():
    summary = summarize([], ARMS, TASKS, 1)
    assert what_this_run_shows(ARMS, summary, {}, None) == [
        "No held-out task has finished in every arm yet, so this run shows nothing about the arms; run it again "
        "with the same --out to play the missing episodes."]


def test_the_oracles_misses_are_named_with_the_context_that_cut_them():
    """Seed 1 of the seeds file (docs/runs): the oracle missed two built-in tasks, every run, because its
    transcripts outgrew 4,096 tokens; seed 0's oracle solved everything and gets no such sentence."""
    from pathlib import Path

    runs = Path(__file__).resolve().parents[2] / "docs" / "runs" / "2026-12-07-smollm2-ladder-seeds-run5"

    def text(seed: int) -> str:
        folder = runs / f"seed-{seed}"
        summary = json.loads((folder / "eval" / "summary.json").read_text())
        arms = json.loads((folder / "eval" / "campaign.json").read_text())["config"]["arms"]
        return " ".join(what_this_run_shows(arms, summary, json.loads((folder / "validity.json").read_text()),
                                            json.loads((folder / "kl.json").read_text())))

    seed1 = text(1)
    assert ("It missed 8 episode(s), on builtin__calc-lexer-hang and builtin__mailmerge-placeholders; 20 of its "
            "episodes ran out of context (ctx_overflow)") in seed1 and "raise max_context_tokens" in seed1
    assert "It missed" not in text(0)
