"""Several training seeds of one experiment: a folder each on the same tasks, one pooled report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdbgym.evaluate.results import EpisodeRow, ResultsStore
from pdbgym.train.experiment.config import ExperimentError, load_experiment
from pdbgym.train.experiment.run import STAGES
from pdbgym.train.experiment.seeds import finished, parse_seeds, pooled_difference, run_seeds, seed_folder

REPO_FILE = Path(__file__).resolve().parents[2] / "experiments" / "smollm2-ladder-short.toml"


def _evaluated(folder: Path, solved: dict[str, dict[str, int]]) -> None:
    """A seed folder whose held-out campaign holds 4 runs a task an arm, ``solved[arm][task]`` of them solved,
    and whose stages are all recorded."""
    store = ResultsStore(folder / "eval")
    store.open({"arms": {arm: arm for arm in solved}})
    store.append(EpisodeRow(arm, task, run, run < count, "finish_unresolved", 3, 1.0, "x.json")
                 for arm, tasks in solved.items() for task, count in tasks.items() for run in range(4))
    (folder / "experiment.json").write_text(json.dumps({"stages": dict.fromkeys(STAGES, {})}))


def test_each_seed_runs_in_its_own_folder_on_the_same_tasks_and_a_finished_one_is_not_run_again(tmp_path):
    config = load_experiment(REPO_FILE)
    ran = []

    def run_one(seed_config, folder, say=print, **_):
        ran.append((seed_config.seed, seed_config.tasks_drawn_with(), folder.name))
        grpo = {f"t{i}": 3 if seed_config.seed != 1 else 2 for i in range(6)}
        _evaluated(folder, {"sft-best": {f"t{i}": 1 for i in range(6)}, "sft-matched": {f"t{i}": 2 for i in range(6)},
                            "grpo": grpo})
        return folder / "report.md"

    seed_folder(tmp_path, 0).mkdir(parents=True)
    _evaluated(seed_folder(tmp_path, 0), {"sft-best": {f"t{i}": 1 for i in range(6)},
                                          "sft-matched": {f"t{i}": 2 for i in range(6)},
                                          "grpo": {f"t{i}": 3 for i in range(6)}})
    said = []
    pooled = run_seeds(config, tmp_path, [0, 1, 2], run_one, say=said.append)
    assert ran == [(1, config.seed, "seed-1"), (2, config.seed, "seed-2")]  # seed 0 had finished; tasks: the file's
    assert any("[seed 0] finished earlier" in line for line in said)
    # a seed run --until eval has its figures but not its extra temperatures: it is not finished, so it runs again
    state = json.loads((seed_folder(tmp_path, 0) / "experiment.json").read_text())
    del state["stages"]["temperatures"]
    (seed_folder(tmp_path, 0) / "experiment.json").write_text(json.dumps(state))
    assert not finished(seed_folder(tmp_path, 0)) and finished(seed_folder(tmp_path, 1))
    text = pooled.read_text()
    assert "| seed | sft-best | sft-matched | grpo | grpo - sft-best | grpo - sft-matched |" in text
    assert "| 1 | 25.0% | 50.0% | 50.0% | 25.0% | 0.0% |" in text
    assert "| grpo - sft-best | 41.7% [" in text and "| 6 x 3 |" in text


def test_the_pooled_difference_pairs_tasks_every_seed_played():
    seeds = [{"a": {"t0": 1.0, "t1": 0.5, "t2": 0.0}, "b": {"t0": 0.5, "t1": 0.5, "t2": 0.0}},
             {"a": {"t0": 1.0, "t1": 0.75}, "b": {"t0": 0.25, "t1": 0.5}}]
    found = pooled_difference(seeds, "a", "b")
    assert found["tasks"] == 2 and found["seeds"] == 2 and found["diff"] == pytest.approx((0.5 + 0 + 0.75 + 0.25) / 4)
    assert pooled_difference(seeds, "a", "missing") is None


def test_seeds_are_read_from_the_flag_or_the_file_and_bad_ones_refused(tmp_path):
    assert parse_seeds("0,1,2") == [0, 1, 2]
    for bad in ("0,0", "a,b", "", "-1"):
        with pytest.raises(ExperimentError, match="--seeds"):
            parse_seeds(bad)
    path = tmp_path / "x.toml"
    path.write_text(REPO_FILE.read_text().replace("seed = 0\n", "seed = 0\nseeds = [0, 1, 2]\ntask_seed = 7\n", 1))
    config = load_experiment(path)
    assert config.seeds == [0, 1, 2] and config.for_seed(2).seed == 2 and config.for_seed(2).tasks_drawn_with() == 7
    assert config.for_seed(2).seeds == [] and config.for_seed(1).digest() != config.for_seed(2).digest()
    path.write_text(REPO_FILE.read_text().replace("seed = 0\n", "seed = 0\nseeds = [1, 1]\n", 1))
    with pytest.raises(ExperimentError, match="distinct integers"):
        load_experiment(path)


def test_a_campaign_cut_short_is_named_and_left_out_and_no_spread_gives_no_interval(tmp_path):
    config = load_experiment(REPO_FILE)
    same = {"sft-best": {f"t{i}": 1 for i in range(4)}, "sft-matched": {f"t{i}": 1 for i in range(4)},
            "grpo": {f"t{i}": 1 for i in range(4)}}
    for seed in (0, 1):
        _evaluated(seed_folder(tmp_path, seed), same)
    cut = seed_folder(tmp_path, 2)
    _evaluated(cut, {"sft-best": {"t0": 0}, "grpo": {"t0": 4}})
    (cut / "experiment.json").write_text(json.dumps({"stages": {"grpo": {}}}))  # killed inside eval
    text = run_seeds(config, tmp_path, [0, 1, 2], lambda *a, **k: None, say=lambda _: None).read_text()
    assert "| 2 |" not in text and "Cut short inside the eval stage: seed 2 (8 held-out episodes" in text
    assert "| grpo - sft-best | 0.0% (no interval: every task's difference is the same under every seed) |" in text
    assert "inf" not in text



def test_the_updates_speed_settings_leave_the_seed_folders_digests_as_recorded(tmp_path):
    """[grpo] update_micro_batches and gradient_checkpointing change how the update runs, not what it computes:
    the seeds file's digests stay those its finished seed folders recorded, with or without them, so a seed
    run at either setting pools with the others."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    seeds_file = root / "experiments" / "smollm2-ladder-seeds.toml"
    recorded = root / "docs" / "runs" / "2026-12-07-smollm2-ladder-seeds-run5"
    config = load_experiment(seeds_file)
    faster = tmp_path / "faster.toml"
    text = seeds_file.read_text()
    faster.write_text(text.replace("[grpo]\n", "[grpo]\nupdate_micro_batches = 4\ngradient_checkpointing = false\n"
                                                "cudnn_attention = true\nfused_dora = false\n", 1))
    tuned = load_experiment(faster)
    assert (tuned.grpo.update_micro_batches, tuned.grpo.gradient_checkpointing, tuned.grpo.cudnn_attention,
            tuned.grpo.fused_dora) == (4, False, True, False)
    assert tomllib.loads(faster.read_text())["grpo"]["update_micro_batches"] == 4
    for seed in (0, 1, 2):
        digest = json.loads((recorded / f"seed-{seed}" / "experiment.json").read_text())["digest"]
        assert config.for_seed(seed).digest() == tuned.for_seed(seed).digest() == digest
    moved = faster.read_text().replace("group = 4", "group = 8", 1)  # a setting of the result does move it
    faster.write_text(moved)
    assert load_experiment(faster).digest() != config.digest()
