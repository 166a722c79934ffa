"""The one per-episode seed (pdbgym.seeds): keyed by task id and run, the same under any task order."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pdbgym.agent.backends.base import SamplingParams
from pdbgym.agent.loop import AgentConfig
from pdbgym.agent.policies import parse_policy
from pdbgym.agent.runner import plan_jobs
from pdbgym.env.environment import EnvConfig
from pdbgym.seeds import episode_seed
from pdbgym.tasks.suites import resolve_tasks


def _seeds(tasks, seed):
    agent = AgentConfig(sampling=SamplingParams(0.7, 1.0, 64, None))
    jobs = plan_jobs(tasks, 2, parse_policy("scripted"), agent, EnvConfig(), set(), seed=seed)
    return {(job.instance_id, job.sample_idx): job.agent.sampling.seed for job in jobs}


def test_a_runs_seed_does_not_depend_on_the_task_list():
    tasks = resolve_tasks("builtin")[:5]
    forward, backward, alone = _seeds(tasks, 3), _seeds(tasks[::-1], 3), _seeds(tasks[2:3], 3)
    assert forward == backward
    assert alone.items() <= forward.items()
    assert len(set(forward.values())) == len(forward)  # every (task, run) draws its own
    assert forward[(tasks[0].instance_id, 1)] == episode_seed(3, tasks[0].instance_id, 1)
    assert _seeds(tasks, 4) != forward


def test_episode_seed_is_stable_and_in_range():
    assert episode_seed(0, "builtin__calc-lexer-hang", 0) == episode_seed(0, "builtin__calc-lexer-hang", 0)
    values = {episode_seed(base, f"t{i}", run) for base in range(3) for i in range(50) for run in range(8)}
    assert len(values) == 3 * 50 * 8 and all(0 <= v < 2**31 for v in values)


def test_eval_takes_a_seed_and_records_it(tmp_path):
    import shutil

    from pdbgym.cli import app

    task = resolve_tasks("builtin")[0]
    shutil.copytree(task.path, tmp_path / "tasks" / task.path.name)
    out = tmp_path / "campaign"
    result = CliRunner().invoke(app, ["eval", "--tasks", str(tmp_path / "tasks"), "--arm", "oracle=scripted",
                                      "--runs", "1", "--out", str(out), "--workers", "1", "--seed", "7"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads((out / "campaign.json").read_text())["config"]["seed"] == 7


def test_run_takes_a_seed(tiny_model_dir, tiny_task, tmp_path):
    from pdbgym.cli import app

    def assistant_turns(seed: int, name: str) -> list[str]:
        transcript = tmp_path / f"{name}.json"
        result = CliRunner().invoke(app, ["run", "--task", str(tiny_task.path), "--policy", str(tiny_model_dir),
                                          "--seed", str(seed), "--turn-budget", "2", "--max-new-tokens", "12",
                                          "--temperature", "1.0", "--json", "--transcript", str(transcript)])
        assert result.exit_code == 0, result.output
        messages = json.loads(transcript.read_text())["messages"]
        return [m["content"] for m in messages if m["role"] == "assistant"]

    first = assistant_turns(5, "a")
    assert first
    assert assistant_turns(5, "b") == first  # the same seed draws the same turns
    assert assistant_turns(6, "c") != first


def test_each_turn_of_a_seeded_episode_draws_with_its_own_seed(smol_tokenizer):
    from types import SimpleNamespace

    from pdbgym.agent.loop import Conversation
    from pdbgym.seeds import turn_seed

    conversation = Conversation(SimpleNamespace(tokenizer=smol_tokenizer), "hermes", "first observation")
    request = conversation.request(SamplingParams(0.7, 1.0, 64, 11))
    assert request.params.seed == turn_seed(11, len(request.prompt_ids)) != 11
    assert conversation.request(SamplingParams(0.7, 1.0, 64, None)).params.seed is None  # unseeded stays so
    # a later turn starts further on, so it draws other random numbers; a rerun draws the same ones
    seeds = {turn_seed(11, position) for position in range(100, 4000, 50)}
    assert len(seeds) == len(range(100, 4000, 50))
    assert turn_seed(11, 120) == turn_seed(11, 120) and 0 <= turn_seed(11, 120) < 2**31
