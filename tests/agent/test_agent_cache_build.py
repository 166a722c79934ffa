"""`pdbgym cache build`: a teacher cache from real episodes, resumed after an interruption."""

import json
import socket

import pytest
import typer
from typer.testing import CliRunner

from pdbgym.agent.commands import cache_build_command
from pdbgym.agent.executor import ExecutorConfig
from pdbgym.agent.loop import AgentConfig
from pdbgym.agent.policies import parse_policy
from pdbgym.agent.runner import completed_samples, plan_jobs, run_all
from pdbgym.env import EnvConfig
from pdbgym.errors import PdbgymError
from pdbgym.rollouts.cache import read_cache, read_manifest, write_cache
from pdbgym.rollouts.record import RolloutRecord

app = typer.Typer()
app.command()(cache_build_command)


def build(*args):
    result = CliRunner().invoke(app, [*args, "--json"])
    return result, (json.loads(result.stdout.strip().splitlines()[-1]) if result.exit_code == 0 else None)


def test_build_writes_cache_and_resumes_after_interruption(tiny_task, tmp_path, smol_tokenizer):
    out = tmp_path / "cache"
    # An interrupted run: only sample 0 of the two finished before the "kill".
    spec = parse_policy("scripted")
    first = plan_jobs([tiny_task], 1, spec, AgentConfig(dataset="unit"), EnvConfig(), set())
    run_all(first, out, ExecutorConfig(workers=1))
    assert completed_samples(out, smol_tokenizer) == {("demo__sub", 0)}
    result, summary = build("--policy", "scripted", "--tasks", str(tiny_task.path), "--runs", "2",
                            "--out", str(out), "--dataset", "unit", "--workers", "2")
    assert result.exit_code == 0, result.output
    assert summary["episodes_run"] == 1 and summary["episodes_skipped_already_done"] == 1
    records = read_cache(out)
    assert sorted(r.sample_idx for r in records) == [0, 1]
    assert all(r.termination_reason == "solved" for r in records)
    assert [e.instance_id for e in read_manifest(out)] == ["demo__sub"]
    assert sorted(p.name for p in (out / "transcripts").iterdir()) == ["demo__sub__0.json", "demo__sub__1.json"]
    _, again = build("--policy", "scripted", "--tasks", str(tiny_task.path), "--runs", "2", "--out", str(out))
    assert again["episodes_run"] == 0 and again["episodes_skipped_already_done"] == 2


def test_cache_of_another_vocabulary_is_refused_before_any_episode(tiny_task, tmp_path, smol_tokenizer):
    out = tmp_path / "cache"
    foreign = RolloutRecord(instance_id="demo__sub", dataset="unit", tokens=[1, 2, 3], prompt_len=2,
                            response_length=1, loss_mask=[1], rollout_log_probs=[-0.1],
                            metadata={"tokenizer": {"name": "Qwen3-4B", "vocab_size": 151936}, "_sample_idx": 0})
    write_cache(out, [foreign])
    with pytest.raises(PdbgymError, match="vocab 151936"):
        completed_samples(out, smol_tokenizer)
    result, _ = build("--policy", "scripted", "--tasks", str(tiny_task.path), "--out", str(out))
    assert result.exit_code != 0 and "write to a new --out" in str(result.exception)
    assert not (out / "transcripts").exists()  # no episode ran


def test_unreachable_server_fails_before_any_episode(tiny_task, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        result, _ = build("--policy", url, "--tasks", str(tiny_task.path), "--out", str(tmp_path / "c"))
    assert result.exit_code != 0 and "cannot reach model server" in str(result.exception)
    assert not (tmp_path / "c").exists()


def test_model_server_policy_builds_a_cache_with_logprobs(tiny_task, tiny_server, tmp_path):
    result, summary = build("--policy", tiny_server.url, "--tasks", str(tiny_task.path), "--out", str(tmp_path / "c"),
                            "--max-new-tokens", "4", "--temperature", "0.7", "--top-p", "0.9", "--seed", "1",
                            "--workers", "1")
    assert result.exit_code == 0, result.output
    record = read_cache(tmp_path / "c")[0]
    assert record.logprob_semantics.to_dict() == {"engine": "sglang", "temperature": 0.7, "top_p": 0.9,
                                                  "top_p_renormalized": False}
    assert summary["termination_reasons"] == {"other": 1}
    assert any(lp < 0 for lp in record.rollout_log_probs)


def test_local_model_folder_policy_runs_in_process(tiny_task, tiny_model_dir, tmp_path):
    result, summary = build("--policy", str(tiny_model_dir), "--tasks", str(tiny_task.path), "--out", str(tmp_path / "c"),
                            "--max-new-tokens", "4", "--seed", "3")
    assert result.exit_code == 0, result.output
    record = read_cache(tmp_path / "c")[0]
    assert record.logprob_semantics.engine == "hf:tempered"
    assert record.metadata["tokenizer"]["vocab_size"] == 49152
    assert summary["termination_reasons"] == {"other": 1}  # random weights never write a tool call


def test_a_corrupted_manifest_is_refused_with_the_repair_command_and_resumes_once_repaired(tiny_task, tmp_path):
    from pdbgym.rollouts.cache import repair_manifest

    out = tmp_path / "cache"
    _, first = build("--policy", "scripted", "--tasks", str(tiny_task.path), "--out", str(out))
    assert first["episodes_run"] == 1
    (out / "manifest.json").write_text('[{"dataset": "pdbgym_builtin", "instance_id"')  # a write cut short
    result, _ = build("--policy", "scripted", "--tasks", str(tiny_task.path), "--runs", "2", "--out", str(out))
    assert result.exit_code != 0 and f"pdbgym cache repair {out}" in str(result.exception)
    assert len(list((out / "transcripts").iterdir())) == 1  # no episode ran
    repair_manifest(out)
    _, resumed = build("--policy", "scripted", "--tasks", str(tiny_task.path), "--runs", "2", "--out", str(out))
    assert resumed["episodes_run"] == 1 and resumed["episodes_skipped_already_done"] == 1
    assert sorted(r.sample_idx for r in read_cache(out)) == [0, 1]
