"""A local model's episodes over several processes (`ExecutorConfig.local_processes`, `pdbgym.agent.localprocs`).

Real spawned processes throughout: the model's episodes played by two children match those played in this
process, a child killed mid-episode costs only what it had in flight, and stopping ends every child.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from pdbgym.agent.backends.base import SamplingParams
from pdbgym.agent.executor import ExecutorConfig, run_jobs
from pdbgym.agent.localprocs import Spread, shares
from pdbgym.agent.loop import AgentConfig
from pdbgym.agent.policies import parse_policy
from pdbgym.agent.runner import plan_jobs, run_job
from pdbgym.env import EnvConfig


def _jobs(task, model_dir, runs: int, policies: tuple[str, ...] = ()):
    agent = AgentConfig(dataset="t", max_context_tokens=2048, sampling=SamplingParams(temperature=0.7, max_new_tokens=4))
    jobs = []
    for text in policies or (str(model_dir),):
        jobs += plan_jobs([task], runs, parse_policy(text), agent, EnvConfig(turn_budget=2), set(), seed=3)
    return jobs


def test_shares_keep_each_policy_together_and_differ_in_size_by_one_at_most(tiny_task, tiny_model_dir, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(tiny_model_dir, other)
    jobs = [*_jobs(tiny_task, tiny_model_dir, 5), *_jobs(tiny_task, other, 5)]
    jobs = [jobs[i] for i in (0, 5, 1, 6, 2, 7, 3, 8, 4, 9)]  # the two policies interleaved
    two = shares(jobs, 2)
    assert [sorted(jobs[i].policy.target for i in share) for share in two] == [
        [str(tiny_model_dir)] * 5, [str(other)] * 5]  # one model a child
    assert [[jobs[i].sample_idx for i in share] for share in two] == [[0, 1, 2, 3, 4]] * 2  # order kept
    three = shares(jobs, 3)
    assert sorted(len(share) for share in three) == [3, 3, 4]
    assert sorted(i for share in three for i in share) == list(range(10))
    assert shares(jobs[:1], 3) == [[0], [], []]
    with pytest.raises(ValueError, match=">= 1"):
        shares(jobs, 0)


def test_two_processes_play_the_models_episodes_as_this_process_does(tiny_task, tiny_model_dir):
    from pdbgym.agent.policies import loaded_models

    jobs = _jobs(tiny_task, tiny_model_dir, 4)
    before = set(loaded_models())
    spread = {(d.job.sample_idx): d for d in run_jobs(jobs, ExecutorConfig(workers=1, local_processes=2), run_job)}
    assert set(loaded_models()) == before  # the children loaded the model, not this process
    here = {(d.job.sample_idx): d for d in run_jobs(jobs, ExecutorConfig(workers=1), run_job)}
    assert sorted(spread) == sorted(here) == [0, 1, 2, 3]
    for idx, done in spread.items():
        assert done.error is None, done.error
        got, want = done.result.record, here[idx].result.record
        assert got.tokens == want.tokens and got.loss_mask == want.loss_mask  # seeded: the same draws anywhere
        assert done.result.transcript["termination_reason"] == here[idx].result.transcript["termination_reason"]


def _pid_or_die(job) -> tuple[int, int]:
    """A stand-in for playing a job: which process took it; the job of sample 2 kills its process."""
    if job.sample_idx == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2)
    return job.sample_idx, os.getpid()


def _drain(spread: Spread, seconds: float = 120.0) -> list:
    ended, deadline = [], time.monotonic() + seconds
    while not spread.finished and time.monotonic() < deadline:
        ended += spread.poll(0.5)
    assert spread.finished, "jobs never came back"
    return ended


def test_a_killed_process_costs_its_jobs_in_flight_and_the_other_plays_the_rest(tiny_task, tiny_model_dir):
    jobs = _jobs(tiny_task, tiny_model_dir, 8)
    spread = Spread(jobs, _pid_or_die, 2, 1, grace=5.0, torch_threads=1)
    try:
        ended = _drain(spread)
    finally:
        spread.stop()
        spread.close()
    assert sorted(job.sample_idx for job, _, _ in ended) == list(range(8))  # every job came back once
    failed = {job.sample_idx: error for job, result, error in ended if error is not None}
    assert list(failed) == [2] and "exit code -9" in str(failed[2]) and "run again" in str(failed[2])
    pid = {result[0]: result[1] for _, result, _ in ended if result is not None}
    dead = [child.pid for child in spread.children if child.exitcode == -signal.SIGKILL]
    assert len(dead) == 1
    survivor = {child.pid for child in spread.children} - set(dead)
    # Job 3 is handed out after the fatal job 2, which kills whichever child takes it at once: job 3 is the
    # dead child's untaken job where that child held the first share (the survivor stole it), or the
    # survivor's own next job where the survivor, slow to start, had its job 2 stolen by the other.
    assert pid[3] in survivor
    assert all(not child.is_alive() for child in spread.children)


def _slow(job) -> int:
    """A stand-in that marks its start and ignores a stop request (a real episode unwinds at its next await)."""
    Path(os.environ["PDBGYM_TEST_MARKS"], f"{job.sample_idx}").touch()
    time.sleep(60)
    return job.sample_idx


def test_stop_kills_a_process_whose_episode_outlives_the_grace(tiny_task, tiny_model_dir, tmp_path, monkeypatch):
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("PDBGYM_TEST_MARKS", str(marks))  # spawned children inherit it
    jobs = _jobs(tiny_task, tiny_model_dir, 4)
    spread = Spread(jobs, _slow, 2, 2, grace=2.0, torch_threads=1)
    deadline = time.monotonic() + 120
    while len(list(marks.iterdir())) < 4 and time.monotonic() < deadline:  # all four playing
        assert spread.poll(0.1) == []  # polling hands the jobs out
    assert len(list(marks.iterdir())) == 4
    spread.stop()
    spread.close()
    assert [child.exitcode for child in spread.children] == [-signal.SIGKILL] * 2


def test_cache_build_takes_local_processes_from_its_flag(tiny_task, tiny_model_dir, tmp_path):
    import json

    import typer
    from typer.testing import CliRunner

    from pdbgym.agent.commands import cache_build_command
    from pdbgym.agent.policies import loaded_models
    from pdbgym.rollouts.cache import read_cache

    app = typer.Typer()
    app.command()(cache_build_command)
    before = set(loaded_models())
    result = CliRunner().invoke(app, ["--policy", str(tiny_model_dir), "--tasks", str(tiny_task.path), "--out",
                                      str(tmp_path / "c"), "--runs", "3", "--max-new-tokens", "4", "--seed", "3",
                                      "--local-processes", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["episodes_run"] == 3
    assert sorted(r.metadata["_sample_idx"] for r in read_cache(tmp_path / "c")) == [0, 1, 2]
    assert set(loaded_models()) == before  # played in the spawned processes


def _big(job) -> bytes:
    """A stand-in whose result (1 MiB) does not fit a pipe's buffer: its sender waits for this process to read."""
    time.sleep(0.3)
    return b"x" * 2**20


def test_stop_reads_the_pipes_so_a_child_waiting_to_send_a_big_result_ends_cleanly(tiny_task, tiny_model_dir):
    jobs = _jobs(tiny_task, tiny_model_dir, 6)
    spread = Spread(jobs, _big, 2, 1, grace=20.0, torch_threads=1)
    ended: list = []
    deadline = time.monotonic() + 120
    while not ended and time.monotonic() < deadline:
        ended += spread.poll(0.2)
    assert ended and ended[0][1] == b"x" * 2**20
    time.sleep(2.0)  # the children play their next jobs and wait, unread, to send them
    spread.stop()
    spread.close()
    assert [child.exitcode for child in spread.children] == [0, 0]  # ended on SIGTERM, not killed after the grace


class _Unpicklable:
    def __reduce__(self):
        raise TypeError("this result cannot be pickled")


def _awkward(job):
    """A stand-in: sample 1's result cannot be pickled, sample 2 raises an error of a class only the child has."""
    if job.sample_idx == 1:
        return _Unpicklable()
    if job.sample_idx == 2:
        import sys
        import types

        module = types.ModuleType("pdbgym_child_only")
        sys.modules[module.__name__] = module
        module.Boom = type("Boom", (Exception,), {"__module__": module.__name__})
        raise module.Boom("only the child knows this class")
    return job.sample_idx


def test_results_that_cannot_cross_the_pipe_fail_their_own_job_only(tiny_task, tiny_model_dir):
    jobs = _jobs(tiny_task, tiny_model_dir, 4)
    spread = Spread(jobs, _awkward, 1, 1, grace=10.0, torch_threads=1)  # one process, one thread: it must go on
    try:
        ended = _drain(spread)
    finally:
        spread.stop()
        spread.close()
    by_sample = {job.sample_idx: (result, error) for job, result, error in ended}
    assert by_sample[0] == (0, None) and by_sample[3] == (3, None)
    assert "could not be sent back" in str(by_sample[1][1]) and "cannot be pickled" in str(by_sample[1][1])
    assert "could not be read here" in str(by_sample[2][1])


def test_leaving_the_executor_loop_early_ends_every_process(tiny_task, tiny_model_dir):
    import multiprocessing

    jobs = _jobs(tiny_task, tiny_model_dir, 6)
    ended = run_jobs(jobs, ExecutorConfig(workers=1, local_processes=2), run_job)
    first = next(ended)
    assert first.job in jobs
    ended.close()  # the caller stops iterating (GeneratorExit in the executor)
    assert not [child for child in multiprocessing.active_children() if child.name.startswith("pdbgym-local")]
