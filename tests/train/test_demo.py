"""``pdbgym demo`` is the experiment file shipped in the package (``demo.toml``) run through ``pdbgym
experiment run``'s stages: end to end on ladder tasks with a tiny random Llama as the student (real task
generation, a real scripted cache through the sandbox, a real 2-step LoRA SFT, real KL scoring and real
held-out episodes, GRPO skipped by the file); a rerun resumes, other settings and an old demo folder are
refused in one line, and the removed flags say what to do instead."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from homefixtures import fresh_home
from rich.console import Console

from pdbgym.errors import PdbgymError
from pdbgym.progress import progress
from pdbgym.train.demo.config import PRESET, DemoConfig, demo_experiment, run_demo
from pdbgym.train.experiment.config import load_experiment
from pdbgym.train.experiment.recipe import departure_rows
from pdbgym.train.experiment.run import GRPO_SKIPPED

SMALL = {"tasks": {"families": {"ladder0": 4}}, "split": {"test": 0.25}, "sft": {"steps": 2},
         "episodes": {"max_new_tokens": 16}}  # the oracle needs its 8 calls: the turn budget stays


def test_the_shipped_file_is_package_data_and_plays_no_grpo():
    root = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pdbgym"]
    assert any(PRESET in (root / "pdbgym").glob(pattern) for pattern in patterns)  # an installed pdbgym has it
    experiment = load_experiment(PRESET)
    assert PRESET.parent.name == "demo" and experiment.name == "demo" and experiment.grpo.steps == 0
    assert experiment.split.val == 0 and experiment.eval.temperature == 0 and experiment.tasks.families
    assert demo_experiment(DemoConfig()) == experiment  # no flag given: the file as it is
    rows = departure_rows(experiment, experiment.departures)  # each with the file's reason; none of GRPO's
    assert rows and all("no reason given" not in row[3] for row in rows) and not any("GRPO" in row[0] for row in rows)


@pytest.mark.slow
def test_the_demo_runs_the_experiments_stages_and_report_and_resumes(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    out = tmp_path / "demo"
    config = DemoConfig(out=out, base=str(tiny_model_dir), overrides=SMALL, workers=1)
    said: list[str] = []
    log = io.StringIO()  # not a terminal: plain progress lines
    with progress(Console(file=log, width=200), heartbeat_s=1.0) as bars:
        report = run_demo(config, said.append, bars)
    for bar in ("oracle episodes, train", "sft steps, demo-sft", "held-out episodes, greedy"):
        assert f"[{bar}]" in log.getvalue(), bar
    state = json.loads((out / "experiment.json").read_text())
    assert list(state["stages"]) == ["tasks", "split", "oracle", "sft", "grpo", "matched", "eval", "temperatures",
                                     "report"]
    assert state["stages"]["grpo"]["skipped"] == GRPO_SKIPPED and f"[grpo] skipped: {GRPO_SKIPPED}" in said
    split = state["stages"]["split"]
    assert (split["train"], split["test"]) == (3, 1) and "val" not in split and not (out / "tasks" / "val").exists()
    summary = json.loads((out / "eval-summary.json").read_text())
    assert set(summary["arms"]) == {"base", "sft-best", "oracle"} and summary["arms"]["oracle"]["solved"] == 1
    kl = json.loads((out / "kl.json").read_text())["arms"]
    assert kl["base"]["available"] and kl["sft-best"]["kl_per_token"] != kl["base"]["kl_per_token"]
    text = report.read_text()
    assert text.index("## What this run shows") < text.index("## Stages")
    assert "Held-out episodes solved: base 0 of 1, sft-best" in text and "oracle 1 of 1" in text
    assert "| sft-best - base |" in text and "## GRPO steps" not in text and "## Stop at peak" not in text
    assert report.with_suffix(".html").is_file()
    rewritten = ("report.md", "report.html", "experiment.json")  # the report stage runs on every invocation
    written = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name not in rewritten}
    again: list[str] = []
    run_demo(config, again.append)
    assert all(f"[{stage}] finished earlier" in again for stage in ("tasks", "split", "oracle", "sft", "eval"))
    assert {p: p.stat().st_mtime_ns for p in written} == written  # nothing played or trained again
    other = DemoConfig(out=out, base=str(tiny_model_dir), overrides={**SMALL, "sft": {"steps": 3}})
    with pytest.raises(PdbgymError, match=r"other settings \(sft\.steps: 2 -> 3\); give another --out"):
        run_demo(other, said.append)


def test_an_old_demo_folder_is_refused_before_any_stage(tmp_path):
    (tmp_path / "demo.json").write_text("{}")
    with pytest.raises(PdbgymError, match="from before the demo was an experiment file .*remove that folder"):
        run_demo(DemoConfig(out=tmp_path), print)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.json"]


@pytest.mark.parametrize("flags, says", [
    (["--constrained"], "--constrained was removed"),
    (["--teacher", "embedded"], "the demo's teacher is the scripted oracle"),
    (["--eval-runs", "3"], "greedy held-out episodes"),
    (["--sft-steps", "0"], "sft_steps must be"),
])
def test_a_removed_or_bad_flag_is_refused_in_one_line(tmp_path, flags, says):
    out = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "pdbgym.cli", "demo", "--out", str(out), *flags],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and says in lines[0], done.stderr
    assert not out.exists()
