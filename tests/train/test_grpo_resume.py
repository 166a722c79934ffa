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
