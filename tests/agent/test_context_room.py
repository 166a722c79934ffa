"""A context cap that cannot hold an episode's first prompt plus one turn is refused before any episode.

Through the real CLI (`pdbgym eval`, `pdbgym cache build` in a subprocess): exit 2, the numbers and the
flag to change, and nothing written; the defaults pass for every task of the shipped suites.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from homefixtures import fresh_home

from pdbgym.agent.policies import tokenizer_named
from pdbgym.agent.room import check_context_room, first_prompt_tokens
from pdbgym.episode_defaults import EPISODE
from pdbgym.errors import PdbgymError
from pdbgym.tasks.suites import resolve_tasks


def pdbgym(home, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PDBGYM_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("KL_EVAL_TEACHER_CACHE_DIR", None)
    result = subprocess.run([sys.executable, "-m", "pdbgym.cli", *args], capture_output=True, text=True,
                            timeout=300, env=env)
    result.stderr = " ".join(result.stderr.split())  # the error console wraps long messages
    return result


def test_the_defaults_leave_room_on_every_shipped_task(smol_tokenizer):
    for suite in ("builtin", "regression"):
        tasks = resolve_tasks(suite)
        check_context_room(smol_tokenizer, "text", tasks, EPISODE.max_context_tokens, EPISODE.max_new_tokens, "x")
        # The demo's cap (8,192 positions of the embedded model) too.
        check_context_room(smol_tokenizer, "text", tasks, 8192, EPISODE.max_new_tokens, "x")


def test_the_first_prompt_is_measured_on_the_longest_task(smol_tokenizer, tiny_task):
    from dataclasses import replace

    longer = replace(tiny_task, instance_id="longer", problem_statement="word " * 400)
    short = first_prompt_tokens(smol_tokenizer, "text", tiny_task)
    long = first_prompt_tokens(smol_tokenizer, "text", longer)
    assert long > short + 300
    check_context_room(smol_tokenizer, "text", [tiny_task], short + 10, 10, "x")
    with pytest.raises(PdbgymError, match=f"task longer .* is already {long} tokens"):
        check_context_room(smol_tokenizer, "text", [tiny_task, longer], short + 10, 10, "x")


@pytest.mark.slow
def test_eval_refuses_a_context_cap_below_the_first_prompt_before_any_episode(tiny_task, tmp_path):
    home = fresh_home(tmp_path / "home")
    prompt = first_prompt_tokens(tokenizer_named("embedded"), "text", tiny_task)
    out = tmp_path / "c"
    result = pdbgym(home, "eval", "--tasks", str(tiny_task.path), "--arm", "ref=scripted", "--runs", "1",
                    "--out", str(out), "--max-context-tokens", "200")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert (f"--max-context-tokens 200 leaves no room for even one turn: the first prompt of task "
            f"{tiny_task.instance_id}") in result.stderr
    assert f"is already {prompt} tokens" in result.stderr and f"raise --max-context-tokens above {prompt}" in result.stderr
    assert not (out / "episodes.jsonl").exists()


@pytest.mark.slow
def test_a_model_arm_needs_room_for_a_full_turn(tiny_task, tiny_model_dir, tmp_path):
    """A sampled turn may take --max-new-tokens: the prompt fits but a full turn does not."""
    home = fresh_home(tmp_path / "home")
    prompt = first_prompt_tokens(tokenizer_named(str(tiny_model_dir)), "text", tiny_task)
    cap = prompt + 100
    out = tmp_path / "c"
    result = pdbgym(home, "eval", "--tasks", str(tiny_task.path), "--arm", f"m={tiny_model_dir}", "--runs", "1",
                    "--out", str(out), "--max-context-tokens", str(cap), "--max-new-tokens", "512")
    assert result.returncode == 2, result.stderr
    assert (f"--max-context-tokens {cap} cannot hold one full turn" in result.stderr
            and f"up to 512 more (--max-new-tokens); raise --max-context-tokens to at least {prompt + 512}"
            in result.stderr and "lower --max-new-tokens to 100 or less" in result.stderr), result.stderr
    assert f"arm 'm' ({tiny_model_dir})'s tokenizer" in result.stderr
    assert not (out / "episodes.jsonl").exists()


@pytest.mark.slow
def test_cache_build_refuses_it_too(tiny_task, tmp_path):
    home = fresh_home(tmp_path / "home")
    out = tmp_path / "cache"
    result = pdbgym(home, "cache", "build", "--policy", "scripted", "--tasks", str(tiny_task.path), "--out", str(out),
                    "--max-context-tokens", "200")
    assert result.returncode == 2 and "leaves no room for even one turn" in result.stderr, result.stderr
    assert "--policy scripted's tokenizer" in result.stderr and not (out / "manifest.json").exists()
