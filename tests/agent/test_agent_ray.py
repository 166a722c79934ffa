"""Episodes fanned over a local Ray instance land in the same resumable cache as local runs."""

import pytest

from pdbgym.agent.executor import ExecutorConfig
from pdbgym.agent.loop import AgentConfig
from pdbgym.agent.policies import parse_policy
from pdbgym.agent.runner import completed_samples, plan_jobs, run_all
from pdbgym.env import EnvConfig
from pdbgym.rollouts.cache import read_cache

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'pdbgym[ray]'); --ray is untested here")


@pytest.mark.slow
def test_ray_fans_out_episodes_into_the_cache(tiny_task, tmp_path, smol_tokenizer):
    out = tmp_path / "cache"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        jobs = plan_jobs([tiny_task], 2, parse_policy("scripted"), AgentConfig(dataset="ray"),
                         EnvConfig(turn_budget=2), set())
        results = run_all(jobs, out, ExecutorConfig(workers=2, ray_address="local"))
    finally:
        ray.shutdown()
    assert sorted(r.sample_idx for r in results) == [0, 1]
    assert completed_samples(out, smol_tokenizer) == {("demo__sub", 0), ("demo__sub", 1)}
    assert {r.termination_reason for r in read_cache(out)} == {"budget"}
