"""`pdbgym divergence` as a user runs it: a real subprocess on a real cache folder."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from div_models import tiny_model

from pdbgym.rollouts.synthetic import make_synthetic_cache

pytestmark = pytest.mark.slow


def pdbgym(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "pdbgym.cli", "divergence", *args], capture_output=True,
                            text=True, timeout=300, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    result.stderr = " ".join(result.stderr.split())  # the error console wraps long messages
    return result


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    tiny_model("qwen3", seed=0).save_pretrained(root / "teacher")
    tiny_model("qwen3", seed=1).save_pretrained(root / "student")
    make_synthetic_cache(root / "cache", n_instances=4, vocab=1000, lengths=(40, 120), seed=3)
    return root


def test_two_students_and_a_teacher_give_json_plot_and_tables(setup):
    out = setup / "report.json"
    result = pdbgym("--cache", str(setup / "cache"), "--student", str(setup / "student"), "--student",
                    str(setup / "teacher"), "--teacher", str(setup / "teacher"), "--max-new-tokens", "4",
                    "--bootstrap", "200", "--json", str(out), "--plot", str(setup / "report.png"))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert [s["name"] for s in report["students"]] == ["student", "teacher"]
    assert report["context"]["semantics"]["temperature"] == 0.7  # taken from the synthetic cache
    assert report["students"][0]["compat"]["kl_back_mean"] is not None
    # The teacher as its own student: KL(S||T) on its own samples is exactly 0.
    assert report["students"][1]["metrics"]["kl_student_teacher/k3/token_mean"]["value"] == pytest.approx(0, abs=1e-9)
    assert (setup / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert "Paired differences" in result.stdout and "KL(T||S)" in result.stdout


def test_json_to_stdout(setup):
    result = pdbgym("--cache", str(setup / "cache"), "--student", str(setup / "student"), "--max-records", "2",
                    "--bootstrap", "50", "--json", "-")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["context"]["n_records"] == 2 and report["students"][0]["compat"]["jsd_mean"] is None


def run_in_process(*args: str):
    """The same command through typer in this process (cheap), for the error paths."""
    from typer.testing import CliRunner

    from pdbgym.cli import app

    return CliRunner().invoke(app, ["divergence", *args])


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--temperature", "1.0"], "declares"),
        (["--top-p", "0.9"], "need --temperature"),
        (["--max-records", "0"], "--max-records must be >= 1"),
        (["--teacher", "http://127.0.0.1:9", "--noise-floor"], "local teacher"),
    ],
)
def test_bad_requests_raise_errors_that_say_what_to_do(setup, extra, message):
    from pdbgym.errors import PdbgymError

    result = run_in_process("--cache", str(setup / "cache"), "--student", str(setup / "student"), "--json", "-",
                            *extra)
    assert isinstance(result.exception, PdbgymError) and message in str(result.exception)


def test_wrong_vocab_is_refused_before_scoring(setup, tmp_path):
    from pdbgym.divergence.loading import VocabMismatchError

    make_synthetic_cache(tmp_path / "big", n_instances=2, vocab=151_936, lengths=(40, 80), seed=1)
    result = run_in_process("--cache", str(tmp_path / "big"), "--student", str(setup / "student"), "--json", "-")
    assert isinstance(result.exception, VocabMismatchError) and "151936" in str(result.exception)


def test_user_errors_exit_2_with_a_message_and_no_traceback(setup, tmp_path):
    result = pdbgym("--cache", str(setup / "cache"), "--student", str(tmp_path / "nope"), "--json", "-")
    assert result.returncode == 2 and "does not exist" in result.stderr and "Traceback" not in result.stderr


def test_the_embedded_model_is_a_student_like_any_folder(tmp_path, smol_tokenizer):
    """`--student embedded` (issue 25: once refused as "model path 'embedded' does not exist"): the de-quantized
    SmolLM2 is scored under the name the user gave."""
    make_synthetic_cache(tmp_path / "cache", n_instances=2, vocab=len(smol_tokenizer), lengths=(20, 40), seed=4)
    out = tmp_path / "kl.json"
    result = run_in_process("--cache", str(tmp_path / "cache"), "--student", "embedded", "--bootstrap", "50",
                            "--json", str(out))
    assert result.exit_code == 0, result.output + repr(result.exception)
    student = json.loads(out.read_text())["students"][0]
    assert student["name"] == "embedded" and student["metrics"]["kl_teacher_student/k3/token_mean"]["value"] >= 0
