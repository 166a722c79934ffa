"""A stage's merged model copies (``$PDBGYM_HOME/merged/<id>``): made for its episodes, removed after them
with one line saying what they were and how big; a base's own folder is never removed. The experiment's
eval stage on a tiny real stack leaves no copy behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from adapters_testkit import registered_store, shared_world
from homefixtures import fresh_home

from pdbgym.adapters.stacked import StageCopies
from pdbgym.agent.executor import ExecutorConfig
from pdbgym.home import human, size_of


@pytest.fixture
def world(tmp_path_factory):
    return shared_world(tmp_path_factory)


def test_a_stages_copies_are_removed_after_it_and_the_line_says_where_and_how_big(world, tmp_path, monkeypatch):
    home = fresh_home(tmp_path / "home")
    monkeypatch.setenv("PDBGYM_HOME", str(home))
    store = registered_store(world, tmp_path / "store")
    copies = StageCopies(store)
    assert copies.folder("base") == world.base  # a base is its registered folder: not a copy, never removed
    folders = [copies.folder("sft"), copies.folder("top"), copies.folder("sft")]  # asked twice: one copy
    assert sorted(p.name for p in (home / "merged").iterdir()) == sorted({p.name for p in folders})
    sizes = {p: size_of(p) for p in folders}
    line = copies.remove()
    assert not list((home / "merged").iterdir()) and world.base.is_dir()
    assert line.startswith(f"2 merged model copies written to {home / 'merged'} for this stage ({human(sum(sizes.values()))}: ")
    assert f"sft ({store.resolve('sft')[:12]}) {human(sizes[folders[0]])}, top (" in line
    assert "removed after it (re-merged from the store when used)" in line
    assert copies.remove() == ""  # nothing left to remove, nothing to say
    again = StageCopies(store).folder("top")  # a later use merges it again
    assert (again / "config.json").is_file()


def test_the_experiments_eval_stage_leaves_no_merged_copy_and_says_what_it_wrote(world, tmp_path, monkeypatch):
    from pdbgym.adapters.operations import register_path
    from pdbgym.adapters.store import Store
    from pdbgym.train.experiment import run as run_module
    from pdbgym.train.experiment.config import SFT_CHOICE_FILE, load_experiment

    home = fresh_home(tmp_path / "home")
    monkeypatch.setenv("PDBGYM_HOME", str(home))
    config = load_experiment(Path(__file__).resolve().parents[2] / "experiments" / "smollm2-ladder.toml")
    out = tmp_path / "run"
    store = Store(out / "adapters")
    register_path(store, world.base, None, ["base"], None)
    register_path(store, world.sft, "base", [f"{config.name}-sft-s32"], None)
    register_path(store, world.rl, f"{config.name}-sft-s32", [f"{config.name}-grpo"], None)
    (out / "sft").mkdir(parents=True)
    (out / "sft" / SFT_CHOICE_FILE).write_text(json.dumps({"chosen": f"{config.name}-sft-s32"}))
    seen: dict[str, bool] = {}

    def campaign(eval_config, on_episode=None, on_plan=None):  # the episodes: every model arm's folder is there while they play
        for arm in eval_config.arms:
            name, folder = arm.split("=", 1)
            seen[name] = name in ("base", "oracle") or (Path(folder) / "config.json").is_file()
        Path(eval_config.json_out).write_text(json.dumps({"arms": {  # one summary a sampling temperature
            name: {"pass@1": {"mean": 0.0}} for name in ("base", "sft-best", "grpo", "oracle")}}))

    monkeypatch.setattr(run_module, "run_evaluation", campaign)
    monkeypatch.setattr(run_module, "oracle_kl", lambda *_args, **_kw: {})
    monkeypatch.setattr(run_module, "tool_call_validity", lambda *_args: {})
    said: list[str] = []
    run_module._eval(config, out, "cpu", ExecutorConfig(workers=1), said.append)
    assert seen == {"base": True, "sft-best": True, "grpo": True, "oracle": True}
    assert not list((home / "merged").iterdir())  # both copies removed after the stage
    assert len(said) == 1 and said[0].startswith(f"[eval] 2 merged model copies written to {home / 'merged'} ")
    assert f"{config.name}-sft-s32 (" in said[0] and f"{config.name}-grpo (" in said[0]
