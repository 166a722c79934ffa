"""`pdbgym eval --teacher-cache`: KL of each local-model arm to a teacher cache, beside accuracy.

The cache is made the way the divergence library reads caches: records of a tiny random teacher whose
cached log-probs are that teacher's own scores (so the teacher scored as an arm has KL ~0), written by
``rollouts.cache.write_cache`` with the tokenizer's fingerprint in each record.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from homefixtures import fresh_home
from typer.testing import CliRunner

from pdbgym.divergence.compare import DivergenceConfig, compare
from pdbgym.divergence.scoring import ScoringConfig, score_records
from pdbgym.errors import PdbgymError
from pdbgym.evaluate.divergence_arms import (
    ORACLE_TEACHER_REASON,
    SCRIPTED_REASON,
    SERVER_REASON,
    UNNAMED_TEACHER_REASON,
    ArmDivergenceConfig,
    arm_divergence,
)
from pdbgym.modelload import load_causal_lm
from pdbgym.rollouts.record import LogprobSemantics, RolloutRecord, tokenizer_fingerprint

from modelfixtures import word_tokenizer
from taskfixtures import make_task

pytestmark = pytest.mark.slow
VOCAB = 64
SEMANTICS = LogprobSemantics(engine="test", temperature=1.0, top_p=1.0, top_p_renormalized=False)
SWAPPED = [1, 0, *range(2, VOCAB)]  # same tokens and size, two ids exchanged: another tokenizer
HEADLINE = "kl_teacher_student/k3/token_mean"


def _tiny_model(seed: int):
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(seed)
    config = Qwen3Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=16, intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=512)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)  # peaked distributions, so students differ clearly
    return model.eval()


def _records(fingerprint: str) -> list[RolloutRecord]:
    rng = np.random.default_rng(5)
    records = []
    for index in range(6):
        prompt, response = 5, 10 + index
        mask = [1] * 4 + [0] * 2 + [1] * (response - 6)
        records.append(RolloutRecord(
            instance_id=f"task{index % 3}", dataset="unit", tokens=rng.integers(2, VOCAB, prompt + response).tolist(),
            prompt_len=prompt, response_length=response, loss_mask=mask, rollout_log_probs=[0.0] * response,
            metadata={"instance_id": f"task{index % 3}", "_sample_idx": index // 3, "_termination_reason": "solved",
                      "logprob_semantics": SEMANTICS.to_dict(),
                      "tokenizer": {"name": "words", "vocab_size": VOCAB, "fingerprint": fingerprint}}))
    return records


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Model folders (teacher, student, one with another tokenizer) and a cache of the teacher's samples."""
    from pdbgym.rollouts.cache import write_cache

    root = tmp_path_factory.mktemp("kl")
    tokenizer = word_tokenizer(VOCAB)
    for name, seed, order in (("teacher", 0, None), ("student", 1, None), ("othertok", 1, SWAPPED)):
        _tiny_model(seed).save_pretrained(root / name)
        word_tokenizer(VOCAB, order).save_pretrained(root / name)
    records = _records(tokenizer_fingerprint(tokenizer))
    teacher = load_causal_lm(root / "teacher", device="cpu")
    for record, values in zip(records, score_records(teacher, records, SEMANTICS, ScoringConfig(show_progress=False)),
                              strict=True):
        logprobs = np.zeros(record.response_length)
        logprobs[np.array(record.loss_mask) == 1] = values
        record.rollout_log_probs = logprobs.tolist()
    write_cache(root / "cache", records)
    return root


def _arms(root):
    return {"base": str(root / "student"), "copy": str(root / "teacher"), "ref": "scripted",
            "srv": "http://127.0.0.1:9", "wrongtok": str(root / "othertok")}


def test_each_local_arm_gets_the_divergence_library_figures_and_others_say_why_not(setup):
    result = arm_divergence(_arms(setup), ArmDivergenceConfig(setup / "cache", bootstrap=200, device="cpu"))
    arms = result["arms"]
    assert list(arms) == ["base", "copy", "ref", "srv", "wrongtok"]
    assert result["n_records"] == 6 and result["n_tasks"] == 3 and result["semantics"]["temperature"] == 1.0

    # The arm that is the teacher scores ~0; another model scores clearly above, with a real interval.
    copy, base = arms["copy"], arms["base"]
    assert copy["available"] and copy["compat"]["kl_fwd_mean"] == pytest.approx(0.0, abs=1e-5)
    kl = base["metrics"][HEADLINE]
    assert kl["value"] > 0.05 and kl["ci_low"] < kl["value"] < kl["ci_high"]
    assert base["compat"]["kl_fwd_mean"] == kl["value"]
    assert base["compat"]["kl_back_mean"] is None and base["compat"]["jsd_mean"] is None  # no student samples
    assert base["student_samples_reason"] == UNNAMED_TEACHER_REASON.format(named="none recorded")
    assert result["teacher"] is None
    assert {f"kl_teacher_student/{e}/{a}" for e in ("k1", "k2", "k3")
            for a in ("token_mean", "sequence_mean", "sequence_sum")} == set(base["metrics"])
    assert set(base["per_task"][HEADLINE]) == {"task0", "task1", "task2"}

    # The same figures `pdbgym divergence` gives for that model alone: the library's numbers, not new ones.
    alone = compare(DivergenceConfig(students=[str(setup / "student")], cache=setup / "cache", bootstrap=200,
                                     device="cpu", show_progress=False)).report["students"][0]
    assert alone["metrics"] == base["metrics"] and alone["compat"] == base["compat"]

    # Arms without a local model, and one the library refuses, are n/a with the reason.
    assert arms["ref"] == {"available": False, "reason": SCRIPTED_REASON,
                           "compat": {"kl_fwd_mean": None, "kl_back_mean": None, "jsd_mean": None}}
    assert arms["srv"]["reason"] == SERVER_REASON
    assert not arms["wrongtok"]["available"] and "fingerprint" in arms["wrongtok"]["reason"]

    # Paired difference base - copy on the shared tasks, task-bootstrapped: above 0 here.
    (diff,) = [c for c in result["comparisons"] if c["metric"] == HEADLINE]
    assert (diff["a"], diff["b"], diff["n_tasks"]) == ("base", "copy", 3)
    assert diff["value"] == pytest.approx(kl["value"] - copy["metrics"][HEADLINE]["value"])
    assert 0 < diff["ci_low"] <= diff["value"] <= diff["ci_high"]


def _cached_tasks(root, ids):
    """A folder of tiny tasks named like the cache's tasks (``task0``...)."""
    for instance_id in ids:
        make_task(root / instance_id, instance_id=instance_id)
    return root


def test_eval_with_a_teacher_cache_puts_kl_in_json_and_report(setup, tmp_path, monkeypatch):
    """Real campaign (scripted episodes through the executor) plus a model arm scored on the cache.

    The campaign plays two of the cache's three tasks: only their records are scored, after the
    episodes, and the cache comes from ``$KL_EVAL_TEACHER_CACHE_DIR`` when no ``--teacher-cache`` is given.
    The model arm's episodes are replaced by in-process ones (a random 1-layer model cannot play), so
    the KL part goes through ``run_evaluation``'s hook by rebuilding the report of a campaign folder."""
    from pdbgym.cli import app
    from pdbgym.evaluate.divergence_arms import campaign_divergence
    from pdbgym.evaluate.procedures import rebuild_report

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    monkeypatch.setenv("KL_EVAL_TEACHER_CACHE_DIR", str(setup / "cache"))
    tasks = _cached_tasks(tmp_path / "tasks", ["task0", "task1"])
    out = tmp_path / "campaign"
    args = ["eval", "--tasks", str(tasks), "--arm", "ref=scripted", "--runs", "1", "--out", str(out),
            "--json", str(tmp_path / "s.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["arms"]["ref"]["pass@1"]["mean"] == 1.0
    assert summary["arms"]["ref"]["divergence"]["reason"] == SCRIPTED_REASON
    assert summary["divergence"]["n_records"] == 4 and summary["divergence"]["n_tasks"] == 2
    assert summary["divergence"]["comparisons"] == []
    assert "KL to the teacher cache" in (out / "report.md").read_text()

    # Two model arms' KL in the same folder's report: table per arm, paired difference, n/a reasons; with
    # the teacher model, kl_back_mean and jsd_mean too (the arm that is the teacher: 0 for both).
    campaign_divergence(_arms(setup), setup / "cache", out, teacher=str(setup / "teacher"), max_new_tokens=6)
    rebuild_report(out, tmp_path / "s2.json")
    markdown = (out / "report.md").read_text()
    section = markdown[markdown.index("## KL to the teacher cache"):]
    assert "| base | " in section and "| copy | 0.0000" in section and "fingerprint" in section
    copy_row = next(line for line in section.splitlines() if line.startswith("| copy |")).split(" | ")
    assert copy_row[4:6] == ["0.0000", "0.0000"]  # kl_back_mean, jsd_mean
    summary2 = json.loads((tmp_path / "s2.json").read_text())
    assert summary2["divergence"]["teacher"] == str(setup / "teacher")
    assert json.loads((out / "divergence.json").read_text())["arms"]["base"]["compat"]["kl_back_mean"] > 0
    assert any(p.name.startswith("samples-") for p in (out / "divergence-work").iterdir())  # kept for a rerun
    assert "| arm | KL(T\\|\\|S) k3 |" in section  # pipes in a header are escaped: the table keeps its columns
    assert "### Paired KL differences (A - B)" in section and "| base | copy | +" in section
    page = (out / "report.html").read_text()
    assert "KL to the teacher cache" in page and "Paired KL differences" in page


def test_a_teacher_that_cannot_score_samples_is_refused_before_any_episode(setup, tmp_path, monkeypatch):
    from pdbgym.cli import app

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    monkeypatch.delenv("KL_EVAL_TEACHER_CACHE_DIR", raising=False)
    tasks = _cached_tasks(tmp_path / "tasks", ["task0"])
    base = ["eval", "--tasks", str(tasks), "--arm", "ref=scripted", "--runs", "1"]
    for extra, message in ((["--teacher-cache", str(setup / "cache"), "--teacher", str(tmp_path / "gone")],
                            "does not exist"),
                           (["--teacher", str(setup / "teacher")], "give --teacher-cache")):
        out = tmp_path / f"c{len(extra)}"
        result = CliRunner().invoke(app, [*base, "--out", str(out), *extra])
        assert isinstance(result.exception, PdbgymError) and message in str(result.exception), result.output
        assert not (out / "episodes.jsonl").exists()


def test_a_bad_teacher_cache_is_refused_before_any_episode(tiny_task, tmp_path, monkeypatch):
    from pdbgym.evaluate.procedures import EvalConfig, run_evaluation

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    (tmp_path / "empty").mkdir()
    config = EvalConfig(arms=["ref=scripted"], tasks=str(tiny_task.path), runs=1, out=tmp_path / "c",
                        teacher_cache=tmp_path / "empty")
    with pytest.raises(PdbgymError):
        run_evaluation(config)
    assert not (tmp_path / "c" / "episodes.jsonl").exists()


def test_a_teacher_cache_of_other_tasks_is_refused_before_any_episode(setup, tiny_task, tmp_path, monkeypatch):
    from pdbgym.evaluate.procedures import EvalConfig, run_evaluation

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    config = EvalConfig(arms=["ref=scripted"], tasks=str(tiny_task.path), runs=1, out=tmp_path / "c",
                        teacher_cache=setup / "cache")
    with pytest.raises(PdbgymError, match="holds no record of the 1 task"):
        run_evaluation(config)
    assert not (tmp_path / "c" / "episodes.jsonl").exists()


def test_an_adapter_store_reference_is_scored_as_the_model_it_names(setup, tmp_path, monkeypatch):
    """A store name, resolved by the store's real resolver, gives the numbers of the folder it stands for."""
    from pdbgym import modelload
    from pdbgym.adapters.operations import register_path
    from pdbgym.adapters.stacked import register_store_refs
    from pdbgym.adapters.store import Store

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    monkeypatch.setattr(modelload, "_LINEAGES", [])
    register_path(Store(tmp_path / "store"), setup / "student", None, ["kl-student"], None)
    register_store_refs(tmp_path / "store")
    result = arm_divergence({"stored": "kl-student", "folder": str(setup / "student"), "gone": "no-such-name"},
                            ArmDivergenceConfig(setup / "cache", bootstrap=200, device="cpu"))
    stored, folder = result["arms"]["stored"], result["arms"]["folder"]
    assert stored["available"] and stored["metrics"] == folder["metrics"]
    assert not result["arms"]["gone"]["available"] and "does not exist" in result["arms"]["gone"]["reason"]


def test_the_embedded_arm_scores_zero_against_a_cache_of_its_own_log_probs(tmp_path):
    """The embedded SmolLM2 (the de-quantized folder its backend runs) on a cache it scored itself, recorded
    with the tokenizer fingerprint the agent writes into records: the fingerprints agree and KL is ~0."""
    from pdbgym.agent.backends.base import tokenizer_info
    from pdbgym.agent.backends.embedded import load_embedded_tokenizer
    from pdbgym.modelload import embedded_model_dir
    from pdbgym.rollouts.cache import write_cache

    info = tokenizer_info(load_embedded_tokenizer())
    records = _records(info["fingerprint"])
    for record in records:
        record.metadata["tokenizer"] = info
        record.metadata["policy"] = "embedded"  # what the cache builder records for the embedded policy
        record.tokens = [t * 700 + 11 for t in record.tokens]  # spread over the 49k vocabulary
    model = load_causal_lm(embedded_model_dir(), device="cpu")
    for record, values in zip(records, score_records(model, records, SEMANTICS, ScoringConfig(show_progress=False)),
                              strict=True):
        logprobs = np.zeros(record.response_length)
        logprobs[np.array(record.loss_mask) == 1] = values
        record.rollout_log_probs = logprobs.tolist()
    write_cache(tmp_path / "cache", records)
    result = arm_divergence({"emb": "embedded"}, ArmDivergenceConfig(tmp_path / "cache", bootstrap=100, device="cpu",
                                                                      max_new_tokens=3))
    assert result["arms"]["emb"]["available"], result["arms"]["emb"]
    assert result["arms"]["emb"]["compat"]["kl_fwd_mean"] == pytest.approx(0.0, abs=1e-5)
    # The records name the embedded policy, so it is the teacher that scores the arm's samples: 0 against itself.
    assert result["teacher"] == str(embedded_model_dir())
    assert result["arms"]["emb"]["compat"]["kl_back_mean"] == pytest.approx(0.0, abs=1e-5)
    assert result["arms"]["emb"]["compat"]["jsd_mean"] == pytest.approx(0.0, abs=1e-5)


def test_arm_samples_scored_by_the_teacher_fill_kl_back_and_jsd_as_the_divergence_library_does(setup):
    """With the teacher model, each local arm continues the cache's prompts and the teacher scores them: the
    figures are those of `pdbgym divergence --teacher` for the same model, cache, teacher, cap and seed."""
    teacher = str(setup / "teacher")
    config = ArmDivergenceConfig(setup / "cache", bootstrap=200, device="cpu", teacher=teacher, max_new_tokens=8,
                                 seed=3)
    result = arm_divergence({"base": str(setup / "student"), "copy": teacher, "ref": "scripted"}, config)
    base, copy = result["arms"]["base"], result["arms"]["copy"]
    assert result["teacher"] == teacher and base["student_samples_reason"] is None
    assert base["student_samples"]["n_records"] == 6 and base["student_samples"]["n_tokens"] == 6 * 8
    assert 0 < base["compat"]["kl_back_mean"] < 50 and 0 < base["compat"]["jsd_mean"] < np.log(2)
    assert copy["compat"]["kl_back_mean"] == pytest.approx(0.0, abs=1e-5)  # the teacher against itself
    assert copy["compat"]["jsd_mean"] == pytest.approx(0.0, abs=1e-5)
    assert result["arms"]["ref"]["reason"] == SCRIPTED_REASON

    alone = compare(DivergenceConfig(students=[str(setup / "student")], cache=setup / "cache", teacher=teacher,
                                     max_new_tokens=8, seed=3, bootstrap=200, device="cpu",
                                     show_progress=False)).report["students"][0]
    assert alone["compat"] == base["compat"] and alone["metrics"] == base["metrics"]
    assert "kl_student_teacher/k3/token_mean" in base["metrics"] and "jsd/token_mean" in base["metrics"]


def test_null_kl_back_says_why_and_a_wrong_teacher_is_refused(setup, tmp_path):
    """A scripted-oracle cache has no model to score samples; --teacher must name a model that loads here."""
    from pdbgym.rollouts.cache import read_cache, write_cache

    oracle = read_cache(setup / "cache")
    for record in oracle:
        record.metadata["logprob_semantics"] = {"engine": "deterministic", "temperature": 1.0}
        record.rollout_log_probs = [0.0] * record.response_length
    write_cache(tmp_path / "oracle", oracle)
    entry = arm_divergence({"base": str(setup / "student")},
                           ArmDivergenceConfig(tmp_path / "oracle", bootstrap=50, device="cpu"))["arms"]["base"]
    assert entry["available"] and entry["compat"]["kl_back_mean"] is None
    assert entry["student_samples_reason"] == ORACLE_TEACHER_REASON
    for cache, teacher, message in ((tmp_path / "oracle", str(setup / "teacher"), "scripted oracle"),
                                    (setup / "cache", "http://127.0.0.1:9", "is a server"),
                                    (setup / "cache", str(tmp_path / "gone"), "does not exist")):
        with pytest.raises(PdbgymError, match=message):
            arm_divergence({"base": str(setup / "student")},
                           ArmDivergenceConfig(cache, bootstrap=50, device="cpu", teacher=teacher))
