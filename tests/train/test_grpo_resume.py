"""A GRPO run killed mid-training resumes from its last checkpoint: no step repeated, none lost."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from homefixtures import fresh_home

SCRIPT = Path(__file__).resolve().parent / "grpo_toy.py"
STEPS = 7


def _start(out: Path, env: dict, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SCRIPT), str(out), str(STEPS), *extra], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


@pytest.mark.slow
def test_kill_then_resume_continues_the_step_sequence(tmp_path):
    env = {**os.environ, "PDBGYM_HOME": str(fresh_home(tmp_path / "home")), "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "run"
    first = _start(out, env)
    deadline = time.monotonic() + 120
    while not (out / "checkpoints" / "checkpoint-3" / "trainer_state.json").exists():
        assert first.poll() is None, first.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "no third checkpoint within 120 s"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)  # a hard kill: no handler runs, whatever step was in flight is lost
    first.wait()
    assert not (out / "grpo_run.json").exists()
    saved = sorted(int(p.name.split("-")[1]) for p in (out / "checkpoints").glob("checkpoint-*")
                   if (p / "trainer_state.json").exists())
    resumed = _start(out, env, "--resume")
    _, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, err.decode()[-3000:]
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    state = json.loads((out / "checkpoints" / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
    logged = [entry["step"] for entry in state["log_history"] if "reward" in entry]
    assert logged == list(range(1, STEPS + 1))
    # the leash carried over the kill: the first resumed step's beta follows from the last saved step's KL
    last_saved = max(saved)
    before, after = rows[last_saved - 1], rows[last_saved]
    error = min(max(before["kl"] / 0.05 - 1, -0.2), 0.2)
    assert after["beta"] == pytest.approx(before["beta"] * (1 + error / 5), rel=1e-6)
    assert json.loads((out / "grpo_run.json").read_text())["steps"] == STEPS


def test_a_resume_drops_every_log_row_after_the_checkpoint_it_resumes_from(tmp_path):
    """A killed run logged steps 4 and 5 after its last complete checkpoint (3): --resume plays them again,
    so their rows go from steps.jsonl, outcomes.jsonl and every rank's log; a half-written checkpoint-4
    (no trainer state) and a checkpoint-5 whose trainer state was cut short are not resumed from."""
    from pdbgym.train.grpo.config import GRPORunConfig
    from pdbgym.train.grpo.run import _checkpoint_to_resume
    from pdbgym.train.grpo.trainer import RECIPE_STATE_FILE

    out = tmp_path / "run"
    for step, files in ((3, ("trainer_state.json", RECIPE_STATE_FILE)), (4, (RECIPE_STATE_FILE,))):
        for name in files:
            (out / "checkpoints" / f"checkpoint-{step}").mkdir(parents=True, exist_ok=True)
            (out / "checkpoints" / f"checkpoint-{step}" / name).write_text("{}")
    logs = [out / "steps.jsonl", out / "outcomes.jsonl", out / "ranks" / "rank-0.jsonl", out / "ranks" / "rank-1.jsonl"]
    for log in logs:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("".join(json.dumps({"step": step, "episodes": []}) + "\n" for step in range(1, 6)))
    # a kill in the middle of transformers' own (in-place) write of trainer_state.json: there, but cut short
    (out / "checkpoints" / "checkpoint-5").mkdir()
    (out / "checkpoints" / "checkpoint-5" / RECIPE_STATE_FILE).write_text("{}")
    (out / "checkpoints" / "checkpoint-5" / "trainer_state.json").write_text('{"global_step": 5, "log_his')
    config = GRPORunConfig(policy="p", tasks="t", out=out, resume=True)
    assert _checkpoint_to_resume(config) == str(out / "checkpoints" / "checkpoint-3")
    for log in logs:
        assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [1, 2, 3], log
