"""A real OpenAI-compatible server: `transformers serve` on loopback with a tiny random-weight model.

The server returns text only (no token ids, no log-probs, and HTTP 422 for vLLM's extra fields), so the
token-exact chat backend refuses it and ``connect_chat`` falls back to the text-only backend. The CLI's
``run --policy URL``, ``cache build --policy URL`` and ``eval --arm NAME=URL`` then play whole episodes
against it; with random weights they end however they end, and the records say so honestly.
"""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gitfixtures import published_row

pytest.importorskip("fastapi", reason="transformers serve needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="transformers serve needs the serve extra: pip install -e '.[serve]'")

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def served(tiny_model_dir, tmp_path_factory):
    """(base URL, model folder) of a `transformers serve` process, stopped (whole group) after the session."""
    port = _free_port()
    log = tmp_path_factory.mktemp("transformers-serve") / "serve.log"
    argv = [sys.executable, "-c", "from transformers.cli.transformers import main; main()", "serve",
            str(tiny_model_dir), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with open(log, "wb") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not come up on {url}:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url, tiny_model_dir
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=15)
        assert server.poll() is not None


def test_token_exact_backend_is_refused_and_the_text_backend_plays_a_turn(served, smol_tokenizer):
    from pdbgym.agent.backends.base import BackendError, GenerationRequest, SamplingParams
    from pdbgym.agent.backends.openai_server import OpenAIChatBackend
    from pdbgym.agent.backends.openai_text import OpenAITextChatBackend, connect_chat

    url, model_dir = served
    with pytest.raises(BackendError, match="422"):
        OpenAIChatBackend.connect(url, smol_tokenizer)
    backend = connect_chat(url, smol_tokenizer)
    assert isinstance(backend, OpenAITextChatBackend) and backend.name == str(model_dir)
    params = SamplingParams(temperature=0.7, max_new_tokens=8, seed=1)
    request = GenerationRequest([], [{"role": "user", "content": "hello"}], None, params)
    turn = asyncio.run(backend.generate(request))
    assert turn.finish_reason in ("stop", "length") and turn.text
    assert smol_tokenizer.decode(turn.token_ids, skip_special_tokens=False) == turn.text
    assert turn.logprobs == [0.0] * len(turn.token_ids)
    assert backend.semantics(params).engine == "none"


def _cli(*args: str) -> str:
    from pdbgym.cli import app

    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_run_with_the_server_as_policy_completes_an_episode(served, tiny_task, tmp_path):
    url, _ = served
    transcript = tmp_path / "run.json"
    _cli("run", "--task", str(tiny_task.path), "--policy", url, "--turn-budget", "3", "--max-new-tokens", "16",
         "--sandbox", "plain", "--transcript", str(transcript))
    data = json.loads(transcript.read_text())
    assert data["termination_reason"] in ("other", "budget", "finish_unresolved", "solved")
    assert [m for m in data["messages"] if m["role"] == "assistant"]


def test_cache_build_from_the_server_writes_a_valid_cache(served, tiny_task, tmp_path, smol_tokenizer):
    from pdbgym.rollouts.cache import read_cache
    from pdbgym.rollouts.validate import validate_cache

    url, _ = served
    out = tmp_path / "cache"
    _cli("cache", "build", "--policy", url, "--out", str(out), "--tasks", str(tiny_task.path), "--runs", "1",
         "--max-new-tokens", "16", "--turn-budget", "3", "--workers", "1")
    assert validate_cache(out, vocab_size=len(smol_tokenizer)) == []
    (record,) = read_cache(out)
    assert record.metadata["logprob_semantics"]["engine"] == "none"
    assert record.response_length > 0 and sum(record.loss_mask) > 0


def test_eval_with_a_server_arm_reports_its_episodes(served, tiny_task, tmp_path):
    url, _ = served
    summary = tmp_path / "summary.json"
    _cli("eval", "--tasks", str(tiny_task.path), "--arm", f"served={url}", "--runs", "1", "--out",
         str(tmp_path / "campaign"), "--turn-budget", "3", "--max-new-tokens", "16", "--workers", "1",
         "--json", str(summary))
    arm = json.loads(summary.read_text())["arms"]["served"]
    assert arm["episodes"] == 1 and sum(arm["termination_reasons"].values()) == 1
    assert 0.0 <= arm["pass@1"]["ci"][0] < arm["pass@1"]["ci"][1] <= 1.0
    assert Path(tmp_path / "campaign" / "report.html").is_file()


def _published_row(tmp_path: Path) -> Path:
    """A row as SWE-bench publishes it (repo + base_commit, test_patch), its repository as a local mirror."""
    row = published_row(
        tmp_path / "mirrors" / "acme" / "calc", "acme/calc",
        {"calc/__init__.py": "", "calc/ops.py": "def sub(a, b):\n    return a + b\n",
         "tests/test_ops.py": "from calc.ops import sub\n"},
        {"calc/ops.py": "def sub(a, b):\n    return a - b\n",
         "tests/test_ops.py": "from calc.ops import sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"},
        "calc", ["tests/test_ops.py::test_sub"], [])
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text(json.dumps({**row, "problem_statement": "sub adds"}) + "\n")
    return jsonl


def test_the_seed_loop_runs_on_a_published_instance(served, tmp_path, smol_tokenizer, monkeypatch):
    """Import a row as published through --mirrors, validate it, build a teacher cache from the server and
    evaluate the server on it: every record and episode carries the instance's id."""
    from pdbgym.rollouts.cache import read_cache

    url, _ = served
    monkeypatch.setenv("PDBGYM_GIT_BASE_URL", f"file://{tmp_path}/no-such-remote")
    tasks = tmp_path / "tasks"
    _cli("tasks", "import-swebench", str(_published_row(tmp_path)), "--out", str(tasks),
         "--mirrors", str(tmp_path / "mirrors"))
    _cli("tasks", "validate", str(tasks))
    cache = tmp_path / "cache"
    _cli("cache", "build", "--policy", url, "--out", str(cache), "--tasks", str(tasks), "--runs", "2",
         "--max-new-tokens", "16", "--turn-budget", "3", "--workers", "1")
    assert {record.instance_id for record in read_cache(cache)} == {"acme__calc-1"}
    summary = tmp_path / "summary.json"
    _cli("eval", "--tasks", str(tasks), "--arm", f"served={url}", "--arm", "oracle=scripted", "--runs", "1",
         "--out", str(tmp_path / "campaign"), "--turn-budget", "6", "--max-new-tokens", "16", "--workers", "1",
         "--json", str(summary))
    arms = json.loads(summary.read_text())["arms"]
    assert arms["served"]["episodes"] == 1 and arms["oracle"]["pass@1"]["mean"] == 1.0
    episodes = (tmp_path / "campaign" / "episodes.jsonl").read_text().splitlines()
    assert {json.loads(line)["instance_id"] for line in episodes} == {"acme__calc-1"}
