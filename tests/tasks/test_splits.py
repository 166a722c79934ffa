"""Grouped splits never let a module or function straddle splits; check-splits refuses overlaps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from homefixtures import fresh_home
from typer.testing import CliRunner

from pdbgym.tasks.model import write_task
from pdbgym.tasks.splits import (
    SplitError,
    assign_groups,
    check_splits,
    load_splits,
    make_splits,
    split_warnings,
    write_splits,
)
from pdbgym.tasks.synth.commands import register

PATCH = "--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-x = 2\n+x = 1\n"


def _task(root: Path, instance_id: str, module: str, function: str, body: str) -> Path:
    folder = root / instance_id
    (folder / "repo" / "pkg").mkdir(parents=True)
    (folder / "repo" / "pkg" / f"{module}.py").write_text(body)
    (folder / "repo" / "test_m.py").write_text("def test_a():\n    pass\n")
    write_task(folder, {"instance_id": instance_id, "FAIL_TO_PASS": ["test_m.py::test_a"], "PASS_TO_PASS": [],
                        "patch": PATCH, "source": "lib", "mutated_file": f"pkg/{module}.py",
                        "mutated_function": function, "source_module": f"pkg.{module}"})
    return folder


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    for module in ("alpha", "beta", "gamma", "delta", "epsilon"):
        for number in range(3):
            function = f"f{number % 2}"
            _task(root, f"lib__{module}-{number}", module, function, f"def {function}():\n    return {number}\n")
    return root


def _groups_by_split(data: dict, key: str) -> dict[str, set[str]]:
    return {name: {item[key] for item in items} for name, items in data["splits"].items()}


@pytest.mark.parametrize(("group_by", "key"), [("source-module", "group"), ("function", "mutated_function")])
def test_groups_never_straddle_splits(corpus: Path, group_by: str, key: str) -> None:
    data = make_splits(corpus, val_fraction=0.3, group_by=group_by, seed=1)
    groups = _groups_by_split(data, key)
    assert not groups["train"] & groups["val"]
    assert len(data["splits"]["train"]) + len(data["splits"]["val"]) == 15
    assert data["splits"]["val"], "val got some tasks"
    assert check_splits(data["splits"]) == []
    assert all(len(item["content_hash"]) == 64 for items in data["splits"].values() for item in items)


def test_assign_groups_is_pure_deterministic_and_hits_the_fraction() -> None:
    sizes = {f"g{i}": 1 for i in range(20)}
    first = assign_groups(sizes, 0.3, 0.2, seed=5)
    assert first == assign_groups(sizes, 0.3, 0.2, seed=5)
    counts = {split: list(first.values()).count(split) for split in ("train", "val", "test")}
    assert counts == {"train": 10, "val": 6, "test": 4}
    with pytest.raises(SplitError, match="sum below 1"):
        assign_groups(sizes, 0.6, 0.5, seed=0)


def test_check_splits_names_overlapping_ids_content_and_functions(corpus: Path, tmp_path: Path) -> None:
    data = make_splits(corpus, val_fraction=0.3, group_by="source-module", seed=1)
    train, val = data["splits"]["train"], data["splits"]["val"]
    leaked = dict(train[0])
    val.append(leaked)
    kinds = {o.kind for o in check_splits(data["splits"])}
    assert {"instance_id", "content_hash", "mutated_function"} <= kinds
    # Same buggy content under another id, and one function in two splits, are each caught alone.
    twin = {**train[1], "instance_id": "copy-of-" + train[1]["instance_id"], "mutated_function": None}
    same_function = {"instance_id": "other", "mutated_function": train[2]["mutated_function"]}
    overlaps = check_splits({"train": train, "val": [twin], "test": [same_function]})
    described = [o.describe() for o in overlaps]
    assert any("content_hash" in d and twin["instance_id"] in d for d in described)
    assert any("mutated_function" in d and "other (test)" in d for d in described)


def test_cli_split_then_check_splits_and_refusal(corpus: Path, tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    split_file = tmp_path / "splits.json"
    made = runner.invoke(app, ["split", str(corpus), "--val", "0.3", "--group-by", "function", "--out",
                               str(split_file), "--json"])
    assert made.exit_code == 0, made.output
    assert runner.invoke(app, ["check-splits", str(split_file)]).exit_code == 0
    data = json.loads(split_file.read_text())
    data["splits"]["val"].append(data["splits"]["train"][0])
    bad_file = tmp_path / "bad.json"
    bad_file.write_text(json.dumps(data))
    refused = runner.invoke(app, ["check-splits", str(bad_file)])
    assert refused.exit_code == 1
    assert data["splits"]["train"][0]["instance_id"] in refused.output


def test_duplicate_content_under_grouping_is_refused_at_split_time(corpus: Path, tmp_path: Path) -> None:
    # A copy of one task under a new id and another module label has identical repo content.
    source = next(corpus.iterdir())
    clone = corpus / "zz-clone"
    shutil.copytree(source, clone)
    data = json.loads((clone / "task.json").read_text())
    data.update(instance_id="zz-clone", source_module="pkg.elsewhere", mutated_function="elsewhere")
    (clone / "task.json").write_text(json.dumps(data))
    app = typer.Typer()
    register(app)
    codes = {seed: CliRunner().invoke(app, ["split", str(corpus), "--val", "0.5", "--seed", str(seed), "--out",
                                            str(tmp_path / f"s{seed}.json")]).exit_code for seed in range(6)}
    assert 1 in codes.values(), "some seed separates the twins, and that split is refused"
    for seed, code in codes.items():
        assert (tmp_path / f"s{seed}.json").exists() == (code == 0), "a refused split file is never written"


def test_load_splits_names_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(SplitError, match="no such split file"):
        load_splits(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"splits": {"holdout": []}}))
    with pytest.raises(SplitError, match="'holdout' must be one of"):
        load_splits(bad)


def test_one_large_group_does_not_swallow_val_and_empty_splits_are_warned() -> None:
    # val asks for 3 of 10 tasks; a first-dealt group of 8 would overshoot by 5 to close a gap of 3
    sizes = {"big": 8, "a": 1, "b": 1}
    for seed in range(10):
        assignment = assign_groups(sizes, 0.3, 0.0, seed=seed)
        assert assignment["big"] == "train"
        assert [assignment["a"], assignment["b"]] == ["val", "val"]
    only = {"splits": {"train": [], "val": [{"group": "m", "instance_id": f"t{i}"} for i in range(4)], "test": []},
            "group_by": "source-module", "val_fraction": 0.3, "test_fraction": 0.0}
    assert any("train is empty" in w for w in split_warnings(only))
    assert assign_groups({"m": 14}, 0.3, 0.0, seed=0) == {"m": "train"}
    alone = {"splits": {"train": only["splits"]["val"], "val": [], "test": []}, "group_by": "source-module",
             "val_fraction": 0.3, "test_fraction": 0.0}
    warning, test_warning = split_warnings(alone)
    assert "val is empty though 1 of 4 task(s) were asked for (1 group(s) by source-module" in warning
    assert test_warning.startswith("test is empty (--test was 0)") and "--test 0.2" in test_warning


def test_split_with_the_default_test_fraction_warns_that_test_is_empty(corpus: Path, tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    made = CliRunner().invoke(app, ["split", str(corpus), "--val", "0.3", "--group-by", "function", "--out",
                                    str(tmp_path / "splits.json"), "--json"])
    assert made.exit_code == 0, made.output
    report = json.loads(made.output)
    assert report["tasks"]["test"] == 0
    assert any(w.startswith("test is empty") and "pdbgym tasks split" in w for w in report["warnings"])


def test_evaluating_an_empty_split_is_an_error_that_says_how_to_make_one(corpus: Path, tmp_path: Path) -> None:
    from pdbgym.errors import PdbgymError
    from pdbgym.evaluate.splitsel import tasks_for_split

    split_file = tmp_path / "splits.json"
    write_splits(make_splits(corpus, 0.3, 0.0, "function", 0), split_file)
    assert tasks_for_split(str(corpus), "val", split_file)
    with pytest.raises(PdbgymError, match=r"split 'test' of .* holds no task .*--test 0.2"):
        tasks_for_split(str(corpus), "test", split_file)


def test_write_splits_refuses_overlapping_splits_for_library_callers(corpus: Path, tmp_path: Path) -> None:
    data = make_splits(corpus, val_fraction=0.3, group_by="source-module", seed=1)
    data["splits"]["val"].append(dict(data["splits"]["train"][0]))
    with pytest.raises(SplitError, match="refusing to write .*overlap"):
        write_splits(data, tmp_path / "leaky.json")
    assert not (tmp_path / "leaky.json").exists()


def test_eval_select_on_an_empty_report_split_fails_before_any_episode(corpus: Path, tmp_path: Path) -> None:
    from pdbgym.cli import app

    split_file = tmp_path / "splits.json"
    write_splits(make_splits(corpus, 0.3, 0.0, "function", 0), split_file)
    out = tmp_path / "select"
    result = CliRunner().invoke(app, ["eval", "select", "--checkpoint", "a=scripted", "--checkpoint", "b=scripted",
                                      "--splits", str(split_file), "--tasks", str(corpus), "--out", str(out)])
    assert result.exit_code != 0
    assert "holds no task" in result.output + str(result.exception) and not out.exists()


@pytest.mark.slow
def test_eval_select_passes_its_sampling_and_worker_flags_to_both_campaigns(corpus: Path, tmp_path: Path,
                                                                             monkeypatch) -> None:
    import json

    from pdbgym.cli import app

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))  # the selection ledger
    split_file = tmp_path / "splits.json"
    write_splits(make_splits(corpus, 0.3, 0.3, "source-module", 0), split_file)
    out = tmp_path / "select"
    result = CliRunner().invoke(app, ["eval", "select", "--checkpoint", "a=scripted", "--checkpoint", "b=scripted",
                                      "--splits", str(split_file), "--tasks", str(corpus), "--out", str(out),
                                      "--runs", "1", "--turn-budget", "9", "--max-new-tokens", "77",
                                      "--max-context-tokens", "4096", "--temperature", "0.3", "--workers", "1"])
    assert result.exit_code == 0, result.output + str(result.exception)
    assert "tie: b scored the same on val; a was chosen as the first --checkpoint given" in " ".join(result.output.split())
    for campaign in ("select-val", "report-test"):
        saved = json.loads((out / campaign / "campaign.json").read_text())["config"]
        assert (saved["turn_budget"], saved["max_new_tokens"], saved["context_tokens"], saved["temperature"]) == \
            (9, 77, 4096, 0.3), campaign
