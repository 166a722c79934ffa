"""GRPO through TRL's real GRPOTrainer: a toy suite a tiny model learns, the KL leash, lineage, merge."""

import json
import sys
from pathlib import Path

import pytest
from homefixtures import fresh_home

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_toy import make_toy_model, make_toy_tasks, toy_config, toy_play  # noqa: E402


@pytest.fixture
def toy(tmp_path, monkeypatch):
    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    return make_toy_model(tmp_path / "toy-model"), make_toy_tasks(tmp_path / "toy-tasks"), tmp_path


def _steps(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]


def test_toy_grpo_reward_rises_and_the_delta_is_registered_over_its_parent(toy):
    from pdbgym.adapters.operations import merge_ref
    from pdbgym.adapters.store import Store
    from pdbgym.train.grpo.run import train_grpo

    model, tasks, root = toy
    config = toy_config(root / "run", model, tasks, steps=12, save_steps=6, name="toy-grpo")
    record = train_grpo(config, play=toy_play)
    rows = _steps(root / "run")
    assert [r["step"] for r in rows] == list(range(1, 13))
    rewards = [r["reward"] for r in rows]
    assert sum(rewards[-4:]) / 4 > sum(rewards[:2]) / 2 + 0.3, rewards
    # the leash: each step's beta is the previous one moved by Ziegler's rule on the previous KL
    for before, after in zip(rows, rows[1:], strict=False):
        error = min(max(before["kl"] / config.target_kl - 1, -0.2), 0.2)
        assert after["beta"] == pytest.approx(before["beta"] * (1 + error / config.kl_horizon_steps), rel=1e-6)
    assert rows[-1]["kl"] > 0 and "rewards/outcome/mean" in rows[-1] and "rewards/tampered/mean" in rows[-1]
    # lineage: registered with the exact weights it trained on as parent; the whole chain merges
    store = Store(config.store)
    node = store.get(record["store_id"])
    assert node["parent"] == record["parent_id"] and store.get(node["parent"])["kind"] == "model"
    assert node["adapter"]["method"] == "dora" and node["adapter"]["r"] == 8
    outcome, manifest = merge_ref(store, "toy-grpo", root / "merged")
    assert manifest["target"] == record["store_id"] and outcome.modules_merged[0] > 0


def test_rollout_func_on_a_builtin_task_masks_env_tokens(tiny_model_dir):
    import torch

    from pdbgym.agent.backends.base import SamplingParams
    from pdbgym.agent.backends.hf import load_model_and_tokenizer
    from pdbgym.agent.loop import AgentConfig
    from pdbgym.env import DebugEnv, EnvConfig
    from pdbgym.tasks.suites import resolve_task
    from pdbgym.train.grpo.rollout import BatchedGenerator, run_episodes, sample_from_outcome
    from pdbgym.train.grpo.trainer import rollout_output

    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    task = resolve_task("builtin__calc-lexer-hang")
    generator = BatchedGenerator(model, tokenizer)
    agent = AgentConfig(tool_format="text", max_context_tokens=4096, sampling=SamplingParams(1.0, 1.0, 6, 3))
    env = EnvConfig(turn_budget=3, command_timeout_s=5.0)
    outcomes = run_episodes([task, task], generator, agent, lambda t: DebugEnv(t, env))
    output = rollout_output([sample_from_outcome(o, "text") for o in outcomes])
    assert generator.stats.requests >= 2  # every turn went through the generator's engine
    for prompt, ids, logprobs, mask, outcome in zip(output["prompt_ids"], output["completion_ids"], output["logprobs"],
                                                    output["env_mask"], outcomes, strict=True):
        assert len(ids) == len(logprobs) == len(mask) and prompt + ids == outcome.record.tokens
        assert 0 in mask and 1 in mask and mask[0] == 1 and mask[-1] == 1
        env_text = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m == 0])
        assert "Error:" in env_text  # the tool output (malformed-call answers) sits under env_mask 0
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if m == 0)
        # model tokens carry the sampler's log-probs: what the trainer recomputes at T=1 on the same ids
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float()
        recomputed = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
        model_rows = torch.tensor(mask, dtype=torch.bool)
        assert torch.allclose(recomputed[model_rows], torch.tensor(logprobs)[model_rows], atol=1e-4)
    assert output["termination_reason"] == ["other", "other"] or set(output["termination_reason"]) <= {"other", "budget"}
    assert output["final_test_passed"] == [False, False]
    # each episode's latency split between waiting for turns and the sandbox, logged per step
    from pdbgym.train.grpo.rollout import episode_metrics

    samples = [sample_from_outcome(o, "text") for o in outcomes]
    metrics = episode_metrics(samples)
    assert all(s.facts["model_seconds"] > 0 and s.facts["env_seconds"] > 0 for s in samples)
    assert [s.facts["grade_refused"] for s in samples] == [False, False]  # honest ends: the verdict stood
    assert metrics["episodes/refused"] == 0.0 and metrics["episodes/tampered"] == 0.0
    assert metrics["time/episode_model_s"] == pytest.approx(sum(o.model_seconds for o in outcomes) / 2)
    assert metrics["time/episode_env_s"] == pytest.approx(sum(o.env_seconds for o in outcomes) / 2)


def test_grpo_over_a_stored_sft_adapter_uses_the_sft_model_as_reference_and_gates_on_val(toy):
    from grpo_toy import make_toy_sft_adapter

    from pdbgym.adapters.operations import merge_ref, register_path
    from pdbgym.adapters.store import Store
    from pdbgym.evaluate.selection import SelectionLedger
    from pdbgym.train.grpo.run import train_grpo

    model, tasks, root = toy
    val = make_toy_tasks(root / "val-tasks", count=1, prefix="toyval")
    store = Store(root / "store")
    sft = register_path(store, make_toy_sft_adapter(model, root / "sft"), str(model), ["toy-sft"], None).record
    config = toy_config(root / "run", model, tasks, steps=2, save_steps=1, policy="toy-sft", val_tasks=str(val),
                        val_runs=2, val_k=2, name="toy-grpo-over-sft")
    record = train_grpo(config, play=toy_play)
    rows = _steps(root / "run")
    # step 1 samples from the untouched delta: KL to the reference is 0 only if the reference is the SFT model
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6)
    assert record["parent_id"] == sft["id"]
    assert store.get(record["store_id"])["parent"] == sft["id"]
    gates = [json.loads(line) for line in (root / "run" / "gates.jsonl").read_text().splitlines()]
    assert [g["checkpoint"] for g in gates] == ["checkpoint-1", "checkpoint-2"]
    assert all(g["runs"] == 2 and g["k"] == 2 and len(g["pass_at_1"]["ci"]) == 2 for g in gates)
    chosen = max(gates, key=lambda g: (g["pass_at_1"]["mean"], g["step"]))["checkpoint"]
    assert record["chosen"] == chosen
    selection = SelectionLedger(config.ledger).selections_of("toy-grpo-over-sft", ["toyval__0"])
    assert len(selection) == 1 and len(selection[0].candidates) == 2
    # the result serves: base -> SFT -> delta merges by lineage
    outcome, manifest = merge_ref(store, "toy-grpo-over-sft", root / "merged")
    assert [layer["id"] for layer in manifest["chain"]][1:] == [sft["id"], record["store_id"]]
    assert all(count > 0 for count in outcome.modules_merged)


def test_a_val_task_among_training_tasks_is_refused(toy):
    from pdbgym.errors import PdbgymError
    from pdbgym.train.grpo.run import train_grpo

    model, tasks, root = toy
    with pytest.raises(PdbgymError, match="also training tasks"):
        train_grpo(toy_config(root / "run", model, tasks, steps=1, val_tasks=str(tasks / "toy0")), play=toy_play)


def test_each_step_logs_its_time_in_rollouts_and_in_the_update(toy):
    """time/rollout_s is the rollout function's wall time; time/update_s the rest of TRL's step_time."""
    import time

    from pdbgym.train.grpo.run import train_grpo

    def slow_play(*args, **kwargs):
        time.sleep(0.4)  # rollouts that take a known least time
        return toy_play(*args, **kwargs)

    model, tasks, root = toy
    train_grpo(toy_config(root / "run", model, tasks, steps=2, save_steps=2, name="toy-timed"), play=slow_play)
    for row in _steps(root / "run"):
        assert row["time/rollout_s"] >= 0.4
        assert row["step_time"] >= row["time/rollout_s"]
        assert row["time/update_s"] == pytest.approx(row["step_time"] - row["time/rollout_s"], abs=1e-6)
        assert row["time/update_s"] > 0


def test_a_time_cap_stops_training_early_and_keeps_a_gated_last_checkpoint(toy):
    """--max-minutes: the run ends at the first step past the cap; that step is saved, gated and chosen from."""
    import time

    from pdbgym.train.grpo.run import train_grpo

    def slow_play(*args, **kwargs):
        time.sleep(1.0)
        return toy_play(*args, **kwargs)

    model, tasks, root = toy
    val = make_toy_tasks(root / "val-tasks", count=1, prefix="toyval")
    config = toy_config(root / "run", model, tasks, steps=50, save_steps=25, val_tasks=str(val), val_runs=1,
                        val_k=1, name="toy-capped")
    config.max_minutes = 1.5 / 60  # 1.5 s: each step's rollouts alone take 1 s
    record = train_grpo(config, play=slow_play)
    rows = _steps(root / "run")
    assert 1 <= len(rows) <= 3 and record["steps"] == len(rows)
    gates = [json.loads(line) for line in (root / "run" / "gates.jsonl").read_text().splitlines()]
    assert [g["checkpoint"] for g in gates] == [f"checkpoint-{len(rows)}"] and record["chosen"] == gates[0]["checkpoint"]


def test_a_pause_stops_at_a_gated_checkpoint_unregistered_and_resume_finishes_the_run(toy):
    """pause_after_minutes (an experiment's --minutes): the run stops at a gated checkpoint with nothing
    chosen or registered; --resume plays the steps left and registers the run once."""
    import time

    from pdbgym.adapters.store import Store
    from pdbgym.train.grpo.run import train_grpo

    def slow_play(*args, **kwargs):
        time.sleep(1.0)
        return toy_play(*args, **kwargs)

    model, tasks, root = toy
    val = make_toy_tasks(root / "val-tasks", count=1, prefix="toyval")
    settings = dict(steps=4, save_steps=4, val_tasks=str(val), val_runs=1, val_k=1, name="toy-paused")
    first = toy_config(root / "run", model, tasks, pause_after_minutes=1.5 / 60, **settings)
    record = train_grpo(first, play=slow_play)
    assert record["paused"] and 1 <= record["steps"] < 4 and record["max_steps"] == 4
    assert not (root / "run" / "grpo_run.json").exists() and not (root / "run" / "final").exists()
    assert "toy-paused" not in Store(root / "store").names()
    gates = [json.loads(line) for line in (root / "run" / "gates.jsonl").read_text().splitlines()]
    assert [g["checkpoint"] for g in gates] == [f"checkpoint-{record['steps']}"]  # the pause's checkpoint, gated
    # the pause is no setting of the run: resuming without it is the same recipe
    done = train_grpo(toy_config(root / "run", model, tasks, resume=True, **settings), play=toy_play)
    assert done["steps"] == 4 and "paused" not in done and done["registered"]
    assert [r["step"] for r in _steps(root / "run")] == [1, 2, 3, 4]
    assert done["recipe"] == json.loads((root / "run" / "grpo_run.json").read_text())["recipe"]
    assert "pause_after_minutes" not in done["recipe"]
    assert Store(root / "store").resolve("toy-paused")


def test_tampered_and_verdict_refused_episodes_are_logged_per_step_and_in_total(toy):
    """Each step's rollouts hold one tampered episode and one whose grading refused the verdict: the steps log
    both counts and their running totals, the recipe state keeps the totals, outcomes.jsonl marks the episode."""
    from pdbgym.train.grpo.report import write_grpo_report
    from pdbgym.train.grpo.run import train_grpo
    from pdbgym.train.grpo.trainer import OUTCOMES_FILE, RECIPE_STATE_FILE

    def hacked_play(*args, **kwargs):
        samples = toy_play(*args, **kwargs)
        samples[0].facts.update(termination_reason="tampered", final_test_passed=False, grade_refused=False)
        samples[1].facts.update(termination_reason="finish_unresolved", final_test_passed=False, grade_refused=True)
        return samples

    model, tasks, root = toy
    train_grpo(toy_config(root / "run", model, tasks, steps=2, save_steps=2, name="toy-hacked"), play=hacked_play)
    rows = _steps(root / "run")
    assert [(r["episodes/tampered"], r["episodes/refused"]) for r in rows] == [(1.0, 1.0), (1.0, 1.0)]
    assert [(r["episodes/tampered_total"], r["episodes/refused_total"]) for r in rows] == [(1.0, 1.0), (2.0, 2.0)]
    state = json.loads((root / "run" / "checkpoints" / "checkpoint-2" / RECIPE_STATE_FILE).read_text())
    assert state["tampered_total"] == 2 and state["refused_total"] == 2
    outcomes = [json.loads(line) for line in (root / "run" / OUTCOMES_FILE).read_text().splitlines()]
    assert [sum(e["refused"] for e in row["episodes"]) for row in outcomes] == [1, 1]
    write_grpo_report(root / "run")
    report = json.loads((root / "run" / "training_report.json").read_text())
    assert [r["verdict-refused"] for r in report["tables"]["Steps"]] == [1.0, 1.0]
    assert report["summary"]["verdict-refused episodes (total)"] == 2
