"""`pdbgym train sft --resume`: a run killed with SIGKILL after a checkpoint continues from it and ends
where an uninterrupted run with the same seed ends (same steps, losses, token counts, best checkpoint,
TensorBoard steps), registered once and selected once; an ``--out`` holding a run is never overwritten."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from homefixtures import fresh_home
from recordfixtures import episode_record, write_records

from pdbgym.train.corpus.build import CorpusConfig, build_corpus
from pdbgym.train.sft.config import SFTTrainConfig

STEPS, SAVE, EVAL = 10, 2, 4
COMMANDS = ["b calc.py:3", "p a, b", "view calc.py 1 9", "edit calc.py 3 3 return a - b", "run_tests", "submit"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, smol_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("sft-resume")
    records = [episode_record(smol_tokenizer, f"task{t}", [(COMMANDS[(t + s + i) % 6], f"out {t} {i}") for i in range(3)],
                              sample_idx=s) for t in range(4) for s in range(2)]
    build_corpus(CorpusConfig(caches=[write_records(root / "cache", records)], out=root / "corpus"))
    return root / "corpus"


def _command(base: Path, corpus: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pdbgym.cli", "train", "sft", "--base", str(base), "--data", str(corpus),
            "--out", str(out), "--rank", "4", "--lr", "1.0", "--effective-batch", "2", "--max-steps", str(STEPS),
            "--eval-steps", str(EVAL), "--save-steps", str(SAVE), "--val-fraction", "0.25", "--device", "cpu",
            "--store", str(out.parent / f"store-{out.name}"), "--tensorboard", "--no-report", *extra]


def _env(root: Path, name: str) -> dict[str, str]:
    return {**os.environ, "PDBGYM_HOME": str(fresh_home(root / f"home-{name}")), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _complete(out: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in (out / "checkpoints").glob("checkpoint-*")
                  if (p / "trainer_state.json").is_file())


@pytest.fixture(scope="module")
def runs(tmp_path_factory, corpus, tiny_model_dir):
    """(uninterrupted out, resumed out, what the killed run left: complete checkpoints and logged steps).

    The uninterrupted run goes on beside the killed one and its resume: the two share nothing (their own
    --out, store and home, one torch thread each), so neither needs the other to have finished."""
    root = tmp_path_factory.mktemp("runs")
    whole, resumed = root / "whole", root / "resumed"
    whole_stderr = root / "whole-stderr.txt"  # piped: the progress lines a log gets
    with whole_stderr.open("w") as log:
        uninterrupted = subprocess.Popen(_command(tiny_model_dir, corpus, whole), env=_env(root, "whole"),
                                         stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        first = subprocess.Popen(_command(tiny_model_dir, corpus, resumed), env=_env(root, "resumed"),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 300
        # kill once checkpoint-4 is complete and step 5 has been logged: a step past the checkpoint is lost
        while not ((resumed / "checkpoints" / "checkpoint-4" / "trainer_state.json").is_file()
                   and (resumed / "metrics.jsonl").is_file() and any(r["step"] >= 5 for r in _rows(resumed))):
            assert first.poll() is None, first.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint-4 within 300 s"
            time.sleep(0.01)
        os.killpg(first.pid, signal.SIGKILL)  # no handler runs: whatever step was in flight is lost
        first.wait()
        left = {"checkpoints": _complete(resumed), "logged": [r["step"] for r in _rows(resumed)],
                "finished": (resumed / "adapter" / "pdbgym_train.json").exists()}
        again = subprocess.run(_command(tiny_model_dir, corpus, resumed, "--resume"), env=_env(root, "resumed"),
                               capture_output=True, text=True, timeout=400)
        assert again.returncode == 0, again.stderr[-3000:]
        assert uninterrupted.wait(timeout=400) == 0, whole_stderr.read_text()[-3000:]
    finally:
        if uninterrupted.poll() is None:
            os.killpg(uninterrupted.pid, signal.SIGKILL)
            uninterrupted.wait()
    return whole, resumed, left, json.loads(again.stdout[again.stdout.index("{"):])


@pytest.mark.slow
def test_piped_progress_knows_the_total_before_the_first_step(runs):
    """A log (stderr not a terminal) gets '[...] 0/10' as training begins, not '0/?' until step 1 is done."""
    whole = runs[0]
    lines = re.findall(r"^\[[^\]]*\] (\d+)/(\S+) elapsed", (whole.parent / "whole-stderr.txt").read_text(), re.M)
    known = [(done, total) for done, total in lines if total != "?"]
    assert known and known[0] == ("0", str(STEPS)), lines
    assert known[-1] == (str(STEPS), str(STEPS)), lines


@pytest.mark.slow
def test_the_kill_lost_logged_steps_after_the_last_checkpoint(runs):
    _, resumed, left, _ = runs
    last = max(left["checkpoints"])
    assert last >= 4 and max(left["logged"]) > last, left  # the resumed run had rows to drop and steps to replay
    assert not left["finished"]


@pytest.mark.slow
def test_resumed_run_logs_every_step_once_like_the_uninterrupted_one(runs):
    whole, resumed, _, _ = runs
    for out in (whole, resumed):
        rows = _rows(out)
        assert [r["step"] for r in rows if "loss" in r] == list(range(1, STEPS + 1))
        assert [r["step"] for r in rows if "eval_loss" in r] == [4, 8, 10]
        assert sum("train_runtime" in r for r in rows) == 1  # the end-of-run summary, once
        history = json.loads((out / "adapter" / "trainer_state.json").read_text())["log_history"]
        assert [e["step"] for e in history if "loss" in e] == list(range(1, STEPS + 1))
        assert [e["step"] for e in history if "eval_loss" in e] == [4, 8, 10]


@pytest.mark.slow
def test_resumed_losses_and_token_counts_match_the_uninterrupted_run(runs):
    whole, resumed, _, _ = runs
    a, b = _rows(whole), _rows(resumed)
    for key in ("loss", "eval_loss", "grad_norm", "learning_rate"):
        left = [r[key] for r in a if key in r]
        right = [r[key] for r in b if key in r]
        assert len(left) == len(right) > 0
        assert right == pytest.approx(left, rel=1e-5, abs=1e-7), key
    # TRL's num_tokens counter is not in its checkpoints: it continues from the last logged value
    assert [r["num_tokens"] for r in b if "loss" in r] == [r["num_tokens"] for r in a if "loss" in r]
    # the losses moved: equal curves are not equal because nothing trained
    losses = [r["loss"] for r in a if "loss" in r]
    assert max(losses) - min(losses) > 0.05


@pytest.mark.slow
def test_same_best_checkpoint_adapter_and_one_registration_and_selection(runs):
    import torch
    from safetensors.torch import load_file

    from pdbgym.adapters.store import Store
    from pdbgym.evaluate.selection import SelectionLedger

    whole, resumed, _, printed = runs
    records = [json.loads((out / "adapter" / "pdbgym_train.json").read_text()) for out in (whole, resumed)]
    assert records[1]["best_step"] == records[0]["best_step"] == printed["best_step"]
    # at this learning rate the held-out loss is lowest at step 4, before the kill: the resumed run kept that
    # checkpoint through rotation and wrote its weights, not the last step's
    assert records[0]["best_step"] == 4
    assert records[1]["best_val_loss"] == pytest.approx(records[0]["best_val_loss"], rel=1e-5)
    weights = [load_file(str(out / "adapter" / "adapter_model.safetensors")) for out in (whole, resumed)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.allclose(weights[0][k], weights[1][k], rtol=1e-4, atol=1e-6) for k in weights[0])
    best = load_file(str(resumed / "checkpoints" / "checkpoint-4" / "adapter_model.safetensors"))
    last = load_file(str(resumed / "checkpoints" / f"checkpoint-{STEPS}" / "adapter_model.safetensors"))
    assert all(torch.equal(weights[1][k], best[k]) for k in best)
    assert not all(torch.equal(weights[1][k], last[k]) for k in last)
    store = Store(resumed.parent / "store-resumed")
    adapters = [n for n in store.all_nodes() if n["kind"] == "adapter"]
    assert [n["id"] for n in adapters] == [printed["store_id"]] == [store.names()["resumed"]]
    (selection,) = SelectionLedger(resumed.parent / "home-resumed" / "selection-ledger.jsonl").entries()
    assert selection.chosen == "resumed" and len(selection.candidates) == 3
    assert selection.scores["resumed"] == -records[1]["best_val_loss"]


@pytest.mark.slow
def test_tensorboard_holds_each_step_once_after_the_resume(runs):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    whole, resumed, left, _ = runs
    for out in (whole, resumed):
        events = EventAccumulator(str(out / "tensorboard"))
        events.Reload()
        assert [e.step for e in events.Scalars("train/loss")] == list(range(1, STEPS + 1))
        assert [e.step for e in events.Scalars("eval/loss")] == [4, 8, 10]
    killed, second = sorted((resumed / "tensorboard").glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime)
    # the resumed process trained only the steps after the checkpoint (a rerun from step 0 would log them all)
    alone = EventAccumulator(str(second))
    alone.Reload()
    assert [e.step for e in alone.Scalars("train/loss")] == list(range(max(left["checkpoints"]) + 1, STEPS + 1))
    before = EventAccumulator(str(killed))
    before.Reload()
    killed_steps = [e.step for e in before.Scalars("train/loss")]  # the kill may beat the last step's event
    assert killed_steps == list(range(1, len(killed_steps) + 1))
    assert max(left["checkpoints"]) <= len(killed_steps) <= max(left["logged"])


# ---- the run folder's refusals and the finishing steps, in process --------------------------------------


def _config(root: Path, base: Path, corpus: Path, **options) -> SFTTrainConfig:
    values = dict(base=str(base), data=corpus, out=root / "sft", rank=4, lr=3e-2, effective_batch=2, max_steps=2,
                  eval_steps=2, val_fraction=0.25, store=root / "store", ledger=root / "ledger.jsonl", name="unit",
                  device="cpu")
    values.update(options)
    return SFTTrainConfig(**values)


def test_an_out_holding_a_run_is_refused_and_resume_finishes_it_once(tmp_path, corpus, tiny_model_dir):
    from pdbgym.adapters.store import Store
    from pdbgym.evaluate.selection import SelectionLedger
    from pdbgym.train.errors import TrainError
    from pdbgym.train.sft.trainer import train_sft

    config = _config(tmp_path, tiny_model_dir, corpus)
    first = train_sft(config)
    # a kill after registering and recording the selection, before the record: what that leaves
    record_path = config.out / "adapter" / "pdbgym_train.json"
    record_path.unlink()
    with pytest.raises(TrainError, match="unfinished SFT run.*--resume.*--restart"):
        train_sft(config)
    assert (config.out / "checkpoints" / "checkpoint-2" / "trainer_state.json").is_file()  # nothing deleted
    with pytest.raises(TrainError, match=r"other settings \(lr: 0\.03 then, 0\.01 now\)"):
        train_sft(replace(config, resume=True, lr=1e-2))
    again = train_sft(replace(config, resume=True))
    assert again.node_id == first.node_id and again.best_step == first.best_step == 2
    assert [n["id"] for n in Store(config.store).all_nodes() if n["kind"] == "adapter"] == [first.node_id]
    assert len(SelectionLedger(config.ledger).entries()) == 1
    assert json.loads(record_path.read_text())["store_id"] == first.node_id
    assert [r["step"] for r in again.history if "loss" in r] == [1, 2]
    # a finished run: refused without a flag, returned as it is with --resume
    with pytest.raises(TrainError, match="a finished SFT run"):
        train_sft(config)
    done = train_sft(replace(config, resume=True))
    assert (done.node_id, done.best_val_loss, done.steps) == (first.node_id, first.best_val_loss, 2)
    assert len(SelectionLedger(config.ledger).entries()) == 1


def test_restart_deletes_the_previous_run_and_resume_needs_one(tmp_path, corpus, tiny_model_dir):
    from pdbgym.train.errors import TrainError
    from pdbgym.train.sft.trainer import train_sft

    config = _config(tmp_path, tiny_model_dir, corpus, register=False, val_fraction=0.0, max_steps=3, save_steps=1)
    with pytest.raises(TrainError, match="holds no SFT run to resume"):
        train_sft(replace(config, resume=True))
    with pytest.raises(TrainError, match="give one of them"):
        train_sft(replace(config, resume=True, restart=True))
    train_sft(config)
    assert [p.name for p in sorted((config.out / "checkpoints").glob("checkpoint-*"))] == ["checkpoint-2", "checkpoint-3"]
    (config.out / "notes.txt").write_text("kept")
    result = train_sft(replace(config, restart=True, max_steps=1))
    assert result.steps == 1 and [r["step"] for r in result.history if "loss" in r] == [1]
    assert [p.name for p in (config.out / "checkpoints").glob("checkpoint-*")] == ["checkpoint-1"]
    assert (config.out / "notes.txt").read_text() == "kept"  # only what a run writes is deleted


def test_eval_steps_must_be_a_multiple_of_save_steps(tmp_path, corpus, tiny_model_dir):
    from pdbgym.train.errors import TrainError
    from pdbgym.train.sft.trainer import train_sft

    with pytest.raises(TrainError, match="--eval-steps 4 is not a multiple of --save-steps 3"):
        train_sft(_config(tmp_path, tiny_model_dir, corpus, eval_steps=4, save_steps=3))
    assert not (tmp_path / "sft").exists()


@pytest.mark.slow
def test_two_ddp_processes_resume_a_killed_run(tmp_path, corpus, tiny_model_dir, runs):
    """The same kill and resume under `accelerate launch` with 2 DDP processes (gloo on CPU): the main process
    alone cuts the logs back, every process resumes from the same checkpoint, and the curve is the
    one-process run's (2 processes x micro batch 1 = 1 process x 2 accumulated: the same examples a step)."""
    import psutil
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from pdbgym.adapters.store import Store

    repo = Path(__file__).resolve().parents[2]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
              str(repo / "pdbgym" / "train" / "configs" / "ddp.yaml"), "--num_processes", "2", "--mixed_precision", "no"]
    out = tmp_path / "ddp"
    first = subprocess.Popen(launch + _command(tiny_model_dir, corpus, out)[1:], env=_env(tmp_path, "ddp"), cwd=repo,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 400
    while not ((out / "checkpoints" / "checkpoint-4" / "trainer_state.json").is_file()
               and (out / "metrics.jsonl").is_file() and any(r["step"] >= 5 for r in _rows(out))):
        assert first.poll() is None, first.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint-4 within 400 s"
        time.sleep(0.01)
    # torch's launcher starts each training process in a session of its own: kill them by id, with the launcher
    processes = [psutil.Process(first.pid), *psutil.Process(first.pid).children(recursive=True)]
    assert len(processes) >= 3
    for process in processes:
        process.kill()
    first.wait()
    psutil.wait_procs(processes, timeout=30)
    last = max(_complete(out))
    again = subprocess.run(launch + _command(tiny_model_dir, corpus, out, "--resume")[1:], env=_env(tmp_path, "ddp"),
                           cwd=repo, capture_output=True, text=True, timeout=400)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = _rows(out)
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, STEPS + 1))
    assert [r["step"] for r in rows if "eval_loss" in r] == [4, 8, 10]
    # measured equal to the float; 1e-5 is below the curve's smallest step-to-step change (3e-5 relative)
    for key in ("loss", "eval_loss"):
        one = [r[key] for r in _rows(runs[0]) if key in r]
        assert [r[key] for r in rows if key in r] == pytest.approx(one, rel=1e-5), key
    second = max((out / "tensorboard").glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime)
    events = EventAccumulator(str(second))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == list(range(last + 1, STEPS + 1))
    store = Store(out.parent / "store-ddp")
    assert [n["id"] for n in store.all_nodes() if n["kind"] == "adapter"] == [store.names()["ddp"]]


@pytest.mark.slow
def test_ctrl_c_stops_at_once_keeps_the_last_checkpoint_and_says_how_to_resume(tmp_path, corpus, tiny_model_dir):
    out = tmp_path / "run"
    command = _command(tiny_model_dir, corpus, out)
    command[command.index("--max-steps") + 1] = "100000"  # far more than the test waits for
    process = subprocess.Popen(command, env={**_env(tmp_path, "ctrl-c"), "TMPDIR": str(tmp_path)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while not ((out / "checkpoints").is_dir() and _complete(out)):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)  # a stop that takes longer is hung
    assert process.returncode == 130, stderr[-3000:]
    message = " ".join(stderr.split())
    assert f"checkpoint-{max(_complete(out))} is kept" in message and "--resume" in message
