"""Settings are checked when a command starts: a bad one is an error (exit 2) naming it, before any
episode plays or anything is written, never a failure at the first model turn with advice to rerun the
same command."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pdbgym.agent.backends.base import BackendError, SamplingParams
from pdbgym.cli import main


def _run(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["pdbgym", *args])
    with pytest.raises(SystemExit) as ended:
        main()
    return int(ended.value.code or 0), ""


@pytest.mark.parametrize("flag, value, says", [("--temperature", "-1", "temperature must be >= 0"),
                                                ("--max-new-tokens", "0", "max_new_tokens must be")])
def test_a_model_arms_bad_sampling_is_refused_before_any_episode(tmp_path: Path, monkeypatch, capsys, flag, value,
                                                                 says):
    out = tmp_path / "campaign"
    code, _ = _run(monkeypatch, "eval", "--tasks", "builtin", "--arm", "a=embedded", "--runs", "1", flag, value,
                   "--out", str(out))
    assert code == 2 and says in capsys.readouterr().err
    assert not out.exists()


def test_an_unknown_device_is_refused_before_any_stage(tmp_path: Path, monkeypatch, capsys):
    out = tmp_path / "experiment"
    config = Path(__file__).resolve().parents[1] / "experiments" / "smollm2-ladder-short.toml"
    code, _ = _run(monkeypatch, "experiment", "run", str(config), "--out", str(out), "--device", "tpu",
                   "--until", "tasks")
    assert code == 2 and "--device 'tpu' is not a device" in capsys.readouterr().err
    assert not out.exists()


def test_sampling_settings_are_checked_where_they_are_made():
    with pytest.raises(BackendError, match="temperature"):
        SamplingParams(temperature=-0.5)
    with pytest.raises(BackendError, match=r"top_p must be in \(0, 1\]"):
        SamplingParams(top_p=1.5)
    assert SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=1).temperature == 0.0
