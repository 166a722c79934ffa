"""Split checks before campaigns, and the selection ledger's refusal of stop-at-peak reporting."""

import json

import pytest

from pdbgym.errors import PdbgymError
from pdbgym.evaluate.selection import SelectionLedger, check_reportable, record_selection
from pdbgym.evaluate.splitsel import tasks_for_split
from pdbgym.evaluate.stats import expected_max_standard_normal

from taskfixtures import make_task


def _two_tasks(root, same_content=False):
    make_task(root / "a", instance_id="t_a")
    make_task(root / "b", instance_id="t_b")
    if not same_content:
        ops = root / "b" / "repo" / "calc" / "ops.py"
        ops.write_text(ops.read_text() + "\n# another project\n")
    return root


def _splits_file(root, val, test):
    path = root / "splits.json"
    path.write_text(json.dumps({"splits": {"val": [{"instance_id": i} for i in val],
                                           "test": [{"instance_id": i} for i in test]}}))
    return path


def test_split_selects_its_tasks(tmp_path):
    root = _two_tasks(tmp_path / "tasks")
    splits = _splits_file(tmp_path, ["t_a"], ["t_b"])
    assert [t.instance_id for t in tasks_for_split(str(root), "test", splits)] == ["t_b"]


def test_same_buggy_content_in_two_splits_is_refused(tmp_path):
    root = _two_tasks(tmp_path / "tasks", same_content=True)
    splits = _splits_file(tmp_path, ["t_a"], ["t_b"])
    with pytest.raises(PdbgymError, match="(?s)overlapping splits.*content_hash"):
        tasks_for_split(str(root), "val", splits)


def test_same_id_in_two_splits_is_refused(tmp_path):
    root = _two_tasks(tmp_path / "tasks")
    splits = _splits_file(tmp_path, ["t_a"], ["t_a", "t_b"])
    with pytest.raises(PdbgymError, match="instance_id"):
        tasks_for_split(str(root), "val", splits)


def test_split_naming_unknown_tasks_is_refused(tmp_path):
    root = _two_tasks(tmp_path / "tasks")
    splits = _splits_file(tmp_path, ["t_a", "ghost"], ["t_b"])
    with pytest.raises(PdbgymError, match="(?s)not found.*ghost"):
        tasks_for_split(str(root), "val", splits)
    with pytest.raises(PdbgymError, match="needs --splits"):
        tasks_for_split(str(root), "val", None)


def test_ledger_refuses_reporting_a_checkpoint_on_the_set_that_chose_it(tmp_path):
    ledger = SelectionLedger(tmp_path / "ledger.jsonl")
    val = ["v1", "v2", "v3"]
    scores = {f"ckpt{i}": s for i, s in enumerate([0.644, 0.656, 0.633, 0.700, 0.622, 0.722, 0.767, 0.689, 0.667])}
    chosen = record_selection("val", val, scores, score_se=0.03, ledger=ledger)
    assert chosen.chosen == "ckpt6"
    with pytest.raises(PdbgymError, match="best of 9 candidates"):
        check_reportable(["ckpt6"], list(reversed(val)), force=False, ledger=ledger)  # same set, any order
    assert check_reportable(["ckpt6"], ["t1", "t2"], force=False, ledger=ledger) == []  # a held-out set is fine
    assert check_reportable(["ckpt2"], val, force=False, ledger=ledger) == []  # a candidate not chosen
    warnings = check_reportable(["ckpt6"], val, force=True, ledger=ledger)
    assert warnings[0].expected_inflation == pytest.approx(0.03 * expected_max_standard_normal(9))
    assert "winner's curse" in warnings[0].text()
