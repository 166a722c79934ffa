"""A campaign whose episodes run on a (local) Ray cluster lands in the same resumable results."""

import json

import pytest

from pdbgym.agent.executor import ExecutorConfig
from pdbgym.evaluate.campaign import Arm, CampaignConfig, run_campaign

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'pdbgym[ray]')")


@pytest.mark.slow
def test_campaign_episodes_run_on_ray(tiny_task, tmp_path):
    config = CampaignConfig(tasks="tiny", arms=[Arm("ref", "scripted")], runs=2)
    try:
        rows = run_campaign(config, [tiny_task], tmp_path, executor=ExecutorConfig(workers=4, ray_address="local"))
    finally:
        ray.shutdown()
    assert sorted(r.run for r in rows) == [0, 1]
    assert all(r.final_test_passed and r.termination_reason == "solved" for r in rows)
    transcript = json.loads((tmp_path / rows[0].transcript).read_text())
    assert transcript["final_test_passed"] is True and transcript["env"]["steps"]
    # Every episode's token-exact record is kept beside the results.
    assert (tmp_path / "cache" / "ref" / "manifest.json").is_file()
