"""The demo's loop end to end on 3 built-in tasks with a tiny random Llama as the student: a real split,
a real scripted cache through the sandbox, a real (2-step) LoRA SFT, real KL scoring and real held-out
episodes; then a rerun that reuses every phase, and the report rendered by headless Chromium."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from browser import FIRST_LINE_COLOURS, dump_dom, needs_chromium, pixels_near, screenshot
from homefixtures import fresh_home
from rich.console import Console

from pdbgym.progress import progress
from pdbgym.tasks.suites import SUITES
from pdbgym.termination import TERMINATION_MEANINGS
from pdbgym.train.demo.config import DemoConfig
from pdbgym.train.demo.phases import run_demo

pytestmark = pytest.mark.slow  # every test reads one whole demo run

TASKS = ("billing-invoice-totals", "logstats-level-counts", "latency-percentiles")


@pytest.fixture(scope="module")
def demo(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("demo")
    for name in TASKS:
        shutil.copytree(SUITES["builtin"] / name, root / "tasks" / name)
    patch = pytest.MonkeyPatch()
    patch.setenv("PDBGYM_HOME", str(fresh_home(root / "home")))  # store, merged folders and ledger stay in the test
    config = DemoConfig(out=root / "out", base=str(tiny_model_dir), tasks=str(root / "tasks"), held_out=0.34,
                        sft_steps=2, sft_tokens=1024, workers=1, threads=1,
                        episode=dataclasses.replace(DemoConfig.episode, turn_budget=2, max_new_tokens=16))
    lines: list[str] = []
    log = io.StringIO()  # not a terminal: plain progress lines, a heartbeat every second here
    with progress(Console(file=log, width=200), heartbeat_s=1.0) as bars:
        first = run_demo(config, lines.append, bars)
    lines += log.getvalue().splitlines()
    written = _phase_outputs(config.out)
    with progress(disable=True) as bars:
        second = run_demo(config, lines.append, bars)
    yield config, first, second, written, lines
    patch.undo()


def test_every_phase_runs_and_the_split_keeps_held_out_tasks_out_of_training(demo):
    config, first, _, _, lines = demo
    out = config.out
    assert set(first.phases) == {"split", "teacher", "corpus", "sft", "kl", "eval"}
    assert not any(p["reused"] for p in first.phases.values())
    splits = json.loads((out / "splits.json").read_text())["splits"]
    train = {i["instance_id"] for i in splits["train"]}
    test = {i["instance_id"] for i in splits["test"]}
    assert len(train) == 2 and len(test) == 1 and not train & test
    corpus_tasks = {json.loads(line)["instance_id"] for line in (out / "corpus" / "examples.jsonl").open()}
    assert corpus_tasks == train
    examples = [json.loads(line) for line in (out / "corpus" / "examples.jsonl").open()]
    assert all(len(e["input_ids"]) <= config.sft_tokens and sum(e["assistant_masks"]) > 0 for e in examples)
    episodes = [json.loads(line) for line in (out / "eval" / "episodes.jsonl").open()]
    assert {e["instance_id"] for e in episodes} == test and {e["arm"] for e in episodes} == {"base", "sft", "oracle"}
    assert any(line.startswith("[sft] done in") for line in lines)
    for phase in ("teacher episodes", "sft steps", "held-out episodes"):  # progress lines when piped
        assert any(line.startswith(f"[{phase}]") for line in lines), phase


def test_kl_to_the_oracle_is_the_arms_negative_log_prob_of_its_tokens(demo):
    config, *_ = demo
    kl = json.loads((config.out / "kl.json").read_text())["arms"]
    assert not kl["oracle"]["available"] and "reference fix" in kl["oracle"]["reason"]
    base, sft = kl["base"], kl["sft"]
    # A random 1-layer model is near uniform over the 49,152-id vocabulary: about ln(49152) = 10.8 nats.
    assert 8 < base["kl_per_token"] < 14 and base["ci_low"] <= base["kl_per_token"] <= base["ci_high"]
    assert sft["kl_per_token"] != base["kl_per_token"]  # the merged adapter changed the weights
    assert base["tokens"] > 0 and np.isfinite(sft["kl_per_token"])


def test_report_holds_validity_terminations_with_meanings_and_the_curve(demo):
    config, first, *_ = demo
    report = json.loads((config.out / "demo_report.json").read_text())
    validity = report["validity"]
    assert validity["oracle"]["rate"] == 1.0 and validity["oracle"]["turns"] > 0
    assert validity["base"]["valid"] == 0 < validity["base"]["turns"]  # random weights write no tool call
    ended = report["tables"]["How episodes ended"]
    for row in ended[1:]:
        assert row[1] == TERMINATION_MEANINGS[row[0]]
    assert any("oracle" in cell and "reference fix" in cell for row in report["tables"]["What each arm is"]
               for cell in row)
    assert [r["step"] for r in report["history"] if "loss" in r] == [1, 2]
    text = first.markdown.read_text()
    assert "train_loss.png" in text and "KL to the teacher" in text and "pass@1" in text
    assert "deterministic" in text and "parse_tool_call" in text


def test_a_rerun_reuses_every_finished_phase(demo):
    config, first, second, written, _ = demo
    assert all(second.phases[name]["reused"] for name in ("split", "teacher", "corpus", "sft", "kl", "eval"))
    assert second.phases["sft"]["first_seconds"] == first.phases["sft"]["seconds"]
    assert _phase_outputs(config.out) == written  # nothing trained, played or scored again: no file rewritten
    state = json.loads((config.out / "demo.json").read_text())
    assert state["phases"]["sft"]["reused"] and len(state["load_average"]) == 3


def test_a_rerun_with_other_settings_is_refused_before_any_phase(demo):
    from dataclasses import replace

    from pdbgym.errors import PdbgymError

    config = demo[0]
    before = (config.out / "demo.json").read_text()
    with progress(disable=True) as bars, pytest.raises(PdbgymError, match="sft_steps: 2 -> 3"):
        run_demo(replace(config, sft_steps=3), lambda text: None, bars)
    assert (config.out / "demo.json").read_text() == before


def _phase_outputs(out: Path) -> dict[Path, int]:
    """Every file the phases write (split, caches, corpus, SFT run, KL, eval episodes), with its
    modification time in ns; the report and ``demo.json`` are written again on every run."""
    places = [out / "splits.json", out / "kl.json",
              *(out / name for name in ("cache-train", "cache-test", "corpus", "sft", "eval"))]
    files = [p for place in places for p in ([place] if place.is_file() else place.rglob("*")) if p.is_file()]
    assert len(files) > 10, files  # the layout these names describe is still the demo's
    return {p: p.stat().st_mtime_ns for p in files}


@needs_chromium
def test_report_renders_in_chromium_with_the_curve_and_the_kl_table_visible(demo, tmp_path):
    page = demo[1].page
    dom = dump_dom(page, tmp_path)
    assert "id=\"curve\"" in dom and "id=\"kl\"" in dom
    kl_table = dom[dom.index("id=\"kl\""):].split("</table>")[0]
    assert "base" in kl_table and "sft" in kl_table and "n/a" in kl_table  # oracle: n/a with its reason
    shot = screenshot(page, tmp_path, 2400)
    for colour in FIRST_LINE_COLOURS:  # the train loss and the val loss are on screen
        assert pixels_near(shot, colour) > 20, colour
