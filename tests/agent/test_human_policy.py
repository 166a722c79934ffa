"""A person drives the same tools from the terminal: scripted input, and a real terminal under tmux."""

import json
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from pdbgym.agent.human import HumanPolicy
from pdbgym.agent.play import play_policy

from taskfixtures import make_task

SESSION_INPUT = ["b calc/ops.py:6", "c", "p a - b", "view calc/ops.py 5 6", "edit calc/ops.py 6 6",
                 "    return a - b", ".", "tests all", "submit"]


def test_human_policy_solves_with_typed_commands(tiny_task, tmp_path):
    lines = iter(SESSION_INPUT)
    seen = []
    policy = HumanPolicy(read_line=lambda prompt: seen.append(prompt) or next(lines))
    result = play_policy(tiny_task, policy, transcript_path=tmp_path / "t.json")
    assert result.termination_reason == "solved" and result.final_test_passed
    assert [s for s in seen if s == "pdbgym> "] and "... " in seen


def test_unreadable_input_asks_again(tiny_task):
    lines = iter(["view calc/ops.py notanumber", "submit"])
    policy = HumanPolicy(read_line=lambda prompt: next(lines))
    result = play_policy(tiny_task, policy)
    assert result.actions_used == 1 and result.termination_reason == "finish_unresolved"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_human_policy_in_a_real_terminal(tmp_path):
    task_dir = make_task(tmp_path / "task")
    name = f"pdbgym-{uuid.uuid4().hex[:8]}"
    command = f"{sys.executable} -m pdbgym.cli run --task {task_dir} --policy human --transcript {tmp_path / 't.json'}"
    # The shell keeps the pane alive after pdbgym exits, so its last lines can still be read: without it a
    # fast machine closes the pane between the final print and the next capture.
    shell = f"{command}; echo pdbgym-exit=$?; sleep 600"
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "200", "-y", "50", shell], check=True)

    def screen() -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", name, "-S", "-200"], capture_output=True,
                              text=True).stdout

    def wait_for(text: str, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while text not in screen():
            if time.time() > deadline:
                raise AssertionError(f"{text!r} never appeared on screen:\n{screen()}")
            time.sleep(0.1)

    try:
        wait_for("pdbgym>")  # capture-pane trims trailing spaces
        for line in SESSION_INPUT:
            subprocess.run(["tmux", "send-keys", "-t", name, "-l", line], check=True)
            subprocess.run(["tmux", "send-keys", "-t", name, "Enter"], check=True)
            time.sleep(0.3)
        wait_for("pdbgym-exit=", timeout=90)
        assert "solved" in screen() and "pdbgym-exit=0" in screen(), screen()
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
    steps = json.loads((tmp_path / "t.json").read_text())["env"]["steps"]
    answer = next(s for s in steps if s["args"] == {"command": "p a - b"})
    assert answer["observation"].strip() == "2"  # pdb answered what the person typed, in the buggy frame
