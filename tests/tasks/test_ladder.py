"""The task ladder: generated families are valid tasks on their rungs, demands are measured from the
task, and a split stratified by rung gives every split its share of each rung without leaking groups."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from pdbgym.cli import app
from pdbgym.tasks.difficulty import demands, ladder, rung
from pdbgym.tasks.families import FamilyError, write_family
from pdbgym.tasks.model import load_task
from pdbgym.tasks.splits import SplitError, check_splits, make_splits
from pdbgym.tasks.suites import resolve_tasks
from pdbgym.tasks.symptoms import KINDS, SITES
from pdbgym.tasks.validate import validate_task
from pdbgym.tasks.wrongsite import patched_sites


@pytest.mark.parametrize(("family", "expected_rung"), [("ladder0", 0), ("ladder1", 1)])
def test_a_family_writes_valid_tasks_on_its_rung(tmp_path, family, expected_rung):
    folders = write_family(family, 2, tmp_path, seed=3)
    assert len({f.name for f in folders}) == 2
    for folder in folders:
        task = load_task(folder)
        report = validate_task(task)
        assert report.ok, report.problems
        assert task.extra["demands"] == demands(task).to_dict()
        assert rung(demands(task)) == expected_rung
        assert task.source.startswith(f"family:{family}/")
    assert [f.name for f in write_family(family, 2, tmp_path / "again", seed=3)] == [f.name for f in folders]


def test_builtin_tasks_sit_above_the_lowest_rung_and_several_files_are_the_top():
    builtin = resolve_tasks("builtin")
    assert all(rung(demands(t)) >= 0 for t in builtin)
    assert sum(rung(demands(t)) >= 1 for t in builtin) > len(builtin) // 2
    task = builtin[0]
    two_files = task.patch + task.patch.replace(task.patch.split("\n")[0].split(" b/")[-1], "other/file.py")
    assert demands(replace(task, patch=two_files)).files == 2 and rung(demands(replace(task, patch=two_files))) == 3


def test_a_split_stratified_by_rung_gives_each_split_its_share_of_every_rung(tmp_path):
    write_family("ladder0", 6, tmp_path, seed=1)
    write_family("ladder1", 6, tmp_path, seed=1)
    data = make_splits(tmp_path, val_fraction=0.5, seed=4, stratify="rung")
    assert check_splits(data["splits"]) == []
    for level in (0, 1):
        assert sum(item["rung"] == level for item in data["splits"]["val"]) == 3
        assert sum(item["rung"] == level for item in data["splits"]["train"]) == 3
    groups = {split: {item["group"] for item in items} for split, items in data["splits"].items()}
    assert not groups["train"] & groups["val"]


def test_unknown_families_and_strata_are_refused_by_name(tmp_path):
    with pytest.raises(FamilyError, match="ladder0"):
        write_family("ladder9", 2, tmp_path)
    with pytest.raises(FamilyError, match="--count"):
        write_family("ladder0", 0, tmp_path)
    write_family("ladder0", 2, tmp_path)
    with pytest.raises(SplitError, match="rung"):
        make_splits(tmp_path, 0.5, stratify="size")


def test_a_test_file_linked_out_of_the_repo_is_not_read(tmp_path):
    folder = write_family("ladder0", 1, tmp_path / "tasks", seed=2)[0]
    task = load_task(folder)
    test_file = task.repo / task.FAIL_TO_PASS[0].split("::")[0]
    outside = tmp_path / "host_file.py"
    outside.write_text(test_file.read_text())  # a host file that would say "the test imports the fixed module"
    test_file.unlink()
    test_file.symlink_to(outside)
    assert demands(task).fix_distance == 2  # the link was not followed: nothing known about the imports


def test_the_ladder_command_counts_the_builtin_suite_by_rung():
    builtin = resolve_tasks("builtin")
    result = CliRunner().invoke(app, ["tasks", "ladder", "builtin", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data == json.loads(json.dumps(ladder(builtin)))
    assert data["total"] == len(builtin) == sum(data["rungs"].values())
    assert {row["instance_id"]: row["rung"] for row in data["tasks"]} == {t.instance_id: rung(demands(t)) for t in builtin}
    assert data["by_source"] == {"handwritten": data["rungs"]}
    table = CliRunner().invoke(app, ["tasks", "ladder", "builtin"])
    assert table.exit_code == 0 and builtin[0].instance_id in table.output and "rung 3" in table.output
    summary = CliRunner().invoke(app, ["tasks", "ladder", "builtin", "--summary"])
    assert summary.exit_code == 0 and builtin[0].instance_id not in summary.output


def test_the_ladder_of_a_family_folder_puts_each_family_on_its_rung_as_one_source(tmp_path):
    write_family("ladder0", 3, tmp_path, seed=5)
    write_family("ladder1", 2, tmp_path, seed=5)

    data = ladder(resolve_tasks(tmp_path))
    assert data["rungs"] == {0: 3, 1: 2, 2: 0, 3: 0}
    assert data["by_source"] == {"family:ladder0": {0: 3, 1: 0, 2: 0, 3: 0},
                                 "family:ladder1": {0: 0, 1: 2, 2: 0, 3: 0}}
    assert all(row["oracle_actions"] == 7 and row["files"] == 1 for row in data["tasks"])


def test_symptom_tasks_cover_every_bug_kind_and_their_statements_never_name_the_fix(tmp_path):
    """Five tasks are one of each kind; no statement names the fixed file or function, though each names
    its failing tests; the same seed writes the same tasks, another seed other ones."""
    folders = write_family("symptom", len(SITES), tmp_path / "a", seed=7)
    tasks = [load_task(folder) for folder in folders]
    assert {t.bug_class for t in tasks[:len(KINDS)]} == set(KINDS)
    assert len({(t.source, t.extra["mutated_function"], t.bug_class) for t in tasks}) == len(SITES)  # every site
    for task in tasks:
        assert all(f"`{node}`" in task.problem_statement for node in task.FAIL_TO_PASS)
        described = task.problem_statement
        for node in task.FAIL_TO_PASS:
            described = described.replace(node, "")
        assert task.extra["mutated_file"].split("/")[-1] not in described
        assert task.extra["mutated_function"] not in described
        d = demands(task)
        assert not d.site_named and d.patch_lines == 2 and rung(d) == 1
    again = [f.name for f in write_family("symptom", 5, tmp_path / "b", seed=7)]
    assert again == [f.name for f in folders[:5]]
    assert not set(again) & {f.name for f in write_family("symptom", 5, tmp_path / "c", seed=8)}


def test_a_symptom_task_of_each_kind_is_valid(tmp_path):
    """One task of each bug kind, validated as `tasks validate` does: the failing tests fail, the others
    pass, the reference fix makes them all pass, and pdb reaches the failure."""
    for folder in write_family("symptom", len(KINDS), tmp_path, seed=11):
        task = load_task(folder)
        report = validate_task(task)
        assert report.ok, (folder.name, report.problems)
        assert task.extra["demands"] == demands(task).to_dict() and task.extra["demands"]["rung"] == 1


def test_a_split_by_source_module_keeps_each_symptom_template_on_one_side(tmp_path):
    write_family("symptom", 2 * len(SITES), tmp_path, seed=2)
    data = make_splits(tmp_path, val_fraction=0.3, test_fraction=0.3, seed=5, stratify="rung")
    assert check_splits(data["splits"]) == []
    sides: dict[str, set[str]] = {}
    for split, items in data["splits"].items():
        for item in items:
            sides.setdefault(load_task(item["path"]).extra["source_module"], set()).add(split)
    assert len(sides) == 6 and all(len(splits) == 1 for splits in sides.values())
    assert {split for splits in sides.values() for split in splits} == {"train", "val", "test"}


def test_the_rung_counts_a_statement_that_names_the_site(tmp_path):
    """A one-line fix in an imported module sits on rung 0 only when the statement names the fixed file or
    function: ladder0's does; told by its symptom alone the same task moves to rung 1."""
    task = load_task(write_family("ladder0", 1, tmp_path, seed=4)[0])
    assert demands(task).site_named and rung(demands(task)) == 0
    told = replace(task, problem_statement="The test `" + task.FAIL_TO_PASS[0] + "` fails.")
    assert not demands(told).site_named and rung(demands(told)) == 1
    (site,) = patched_sites(task, task.patch)
    assert demands(replace(task, problem_statement=f"Calling {site.function}() gives the wrong answer.")).site_named
    assert not demands(replace(task, problem_statement=f"Calling {site.function}_all() is wrong.")).site_named
    regression = resolve_tasks("regression")
    assert all(not demands(t).site_named for t in regression) and all(rung(demands(t)) >= 1 for t in regression)


def test_tasks_held_out_for_test_go_there_whole_and_the_rest_split_as_without_them(tmp_path):
    write_family("ladder0", 12, tmp_path / "tasks", seed=3)
    alone = make_splits(tmp_path / "tasks", 0.25, 0.25, seed=6, stratify="rung")
    held = write_family("symptom", 8, tmp_path / "tasks", seed=3)
    ids = {load_task(folder).instance_id for folder in held}
    data = make_splits(tmp_path / "tasks", 0.25, 0.25, seed=6, stratify="rung", test_only=ids)
    assert check_splits(data["splits"]) == [] and data["test_only"] == sorted(ids)
    assert ids <= {item["instance_id"] for item in data["splits"]["test"]}
    for split in ("train", "val", "test"):  # the ladder0 tasks fall exactly as they did without the held-out ones
        assert [i["instance_id"] for i in alone["splits"][split]] == \
            [i["instance_id"] for i in data["splits"][split] if i["instance_id"] not in ids]
    with pytest.raises(SplitError, match="not under"):
        make_splits(tmp_path / "tasks", 0.25, 0.25, test_only={"symptom__nowhere-0"})
