"""``pdbgym experiment run``'s longer quick-profile runs, in a file of their own so that the test workers
(``--dist loadfile``) run them beside ``test_experiment.py``'s: the time budget (``--minutes``) pausing GRPO
at a checkpoint and the next invocation resuming it, and the seed recipe's file (DoRA by epochs, the
turn-budget curriculum)."""

from __future__ import annotations

import json

import pytest
from experimentfiles import REPO_FILE, quick_file
from homefixtures import fresh_home

from pdbgym.agent.executor import ExecutorConfig
from pdbgym.train.experiment.config import load_experiment


@pytest.mark.slow
def test_a_time_budget_pauses_grpo_at_a_checkpoint_and_the_next_invocation_resumes_it(tmp_path, tiny_model_dir,
                                                                                        monkeypatch):
    """--minutes: a spent budget starts no stage; GRPO out of budget pauses at a gated checkpoint, the
    stage unrecorded and nothing registered; the rerun resumes it from that checkpoint; a GRPO folder
    killed before its first checkpoint is started over."""
    from pdbgym.adapters.store import Store
    from pdbgym.train.experiment import run as run_module
    from pdbgym.train.experiment.config import load_experiment

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    config = load_experiment(quick_file(tmp_path, tiny_model_dir), quick=True)
    out, said = tmp_path / "run", []
    run_module.run_experiment(config, out, say=said.append, minutes=1e-9)
    assert said == ["[tasks] not started: the 1e-09-minute budget (--minutes) is spent; run again to go on"]
    assert (out / "report.md").is_file() and not (out / "experiment.json").exists()  # no stage ran
    run_module.run_experiment(config, out, say=said.append, until="sft")
    # the SFT stage trained each [quick.sft] candidate, played each on val, chose one and recorded the choice
    choice = json.loads((out / "sft" / "choice.json").read_text())
    names = {"smollm2-ladder-sft-s1", "smollm2-ladder-sft-s2"}
    assert {c["name"] for c in choice["candidates"].values()} == names <= set(Store(out / "adapters").names())
    assert choice["chosen"] == f"smollm2-ladder-sft-s{choice['steps']}" == run_module.sft_name(config, out)
    ledger = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]
    assert [(e["split"], e["chosen"], sorted(e["candidates"])) for e in ledger] == [("val", choice["chosen"], sorted(names))]
    # rerun after a kill that followed the choice: nothing is trained, played or recorded again
    kept = {p: p.stat().st_mtime_ns for p in (out / "sft").rglob("*") if p.is_file()}
    run_module._sft(config, out, "cpu", ExecutorConfig(workers=2))
    assert {p: p.stat().st_mtime_ns for p in (out / "sft").rglob("*") if p.is_file()} == kept
    assert len((out / "ledger.jsonl").read_text().splitlines()) == 1
    # a GRPO folder with no complete checkpoint (a kill in the first step) is started over, not refused
    (out / "grpo" / "checkpoints" / "checkpoint-1").mkdir(parents=True)
    (out / "grpo" / "steps.jsonl").write_text('{"step": 1}\n')
    real = run_module._grpo
    monkeypatch.setattr(run_module, "_grpo", lambda c, o, d, left: real(c, o, d, 1e-6))  # spent at GRPO's start
    said.clear()
    run_module.run_experiment(config, out, say=said.append, minutes=60)
    assert any(line.startswith("[grpo] paused after") for line in said) and "[eval] started" not in said
    stages = json.loads((out / "experiment.json").read_text())["stages"]
    assert "grpo" not in stages
    assert [json.loads(line)["step"] for line in (out / "grpo" / "steps.jsonl").read_text().splitlines()] == [1]
    assert (out / "grpo" / "checkpoints" / "checkpoint-1" / "trainer_state.json").is_file()
    assert "smollm2-ladder-grpo" not in Store(out / "adapters").names()
    assert "Training stopped after 1 of 2 steps" in (out / "report.md").read_text()
    monkeypatch.setattr(run_module, "_grpo", real)
    said.clear()
    run_module.run_experiment(config, out, say=said.append, until="grpo")
    stages = json.loads((out / "experiment.json").read_text())["stages"]
    assert stages["grpo"]["steps"] == 2 and any(line.startswith("[grpo] started: GRPO of ") for line in said)
    assert json.loads((out / "grpo" / "grpo_run.json").read_text())["policy"] == choice["chosen"]  # GRPO's start
    assert [json.loads(line)["step"] for line in (out / "grpo" / "steps.jsonl").read_text().splitlines()] == [1, 2]
    assert "smollm2-ladder-grpo" in Store(out / "adapters").names()


@pytest.mark.slow
def test_the_seed_recipe_files_quick_profile_trains_dora_by_epochs_under_a_turn_budget_curriculum(
        tmp_path, tiny_model_dir, monkeypatch):
    from pdbgym.train.experiment.run import run_experiment

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    path = tmp_path / "recipe.toml"
    path.write_text(REPO_FILE.with_name("smollm2-seed-recipe.toml").read_text().replace(
        'base = "embedded"', f'base = "{tiny_model_dir}"'))
    out = tmp_path / "run"
    run_experiment(load_experiment(path, quick=True), out, say=lambda _: None, until="grpo")  # all it checks
    adapter = json.loads(next((out / "sft").rglob("adapter_config.json")).read_text())
    assert adapter["use_dora"] and adapter["r"] == 24
    record = json.loads(next((out / "sft").rglob("pdbgym_train.json")).read_text())
    from pdbgym.train.corpus.build import load_corpus, split_by_task

    train, _ = split_by_task(load_corpus(out / "corpus").examples, 0.2, 42)
    assert record["steps"] == -(-len(train) // 2)  # one epoch at effective batch 2
    budgets = [json.loads(line)["turn_budget"] for line in (out / "grpo" / "steps.jsonl").read_text().splitlines()]
    assert budgets == [8.0, 9.0]  # from 8 towards the 10-turn end over 2 steps
    assert "seed 42" in (out / "report.md").read_text()
