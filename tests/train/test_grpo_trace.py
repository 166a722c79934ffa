"""``train grpo --trace-step N``: one optimizer step under torch.profiler, its trace and a summary written, the
step's parts and the engine's as named ranges in it; no other step traced."""

import gzip
import json
import sys
from pathlib import Path

from homefixtures import fresh_home

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_toy import make_toy_model, make_toy_tasks, toy_config, toy_play  # noqa: E402


def test_the_traced_step_writes_a_trace_with_the_steps_parts_and_a_summary(tmp_path, monkeypatch):
    from pdbgym.train.grpo.run import train_grpo

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    model, tasks = make_toy_model(tmp_path / "toy-model"), make_toy_tasks(tmp_path / "toy-tasks")
    out = tmp_path / "run"
    train_grpo(toy_config(out, model, tasks, steps=3, save_steps=3, trace_step=2), play=toy_play)
    assert sorted(p.name for p in (out / "trace").iterdir()) == ["step-2.json.gz", "step-2.txt"]
    text = (out / "trace" / "step-2.txt").read_text()
    assert text.startswith("wall seconds: ") and "by self CPU time:" in text and "aten::" in text
    events = json.loads(gzip.decompress((out / "trace" / "step-2.json.gz").read_bytes()))["traceEvents"]
    names = {e.get("name") for e in events}
    # the update's parts (UpdateClock) and the engine's decode and draw, as ranges of the traced step
    assert {"pdbgym/policy_forward", "pdbgym/reference", "pdbgym/loss", "pdbgym/engine/draw"} <= names, sorted(
        n for n in names if n and n.startswith("pdbgym"))
    wall = float(text.split()[2])
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert wall >= 0.5 * rows[1]["step_time"]  # the trace spans the step, rollouts included


def test_a_trace_step_past_the_run_is_refused(tmp_path):
    import pytest

    from pdbgym.episode_defaults import SettingsError

    with pytest.raises(SettingsError, match=r"trace_step 4 is past the run's 3 steps.*from 1 to 3"):
        toy_config(tmp_path / "run", tmp_path, tmp_path, steps=3, trace_step=4)


def test_the_kernel_sum_counts_kernels_not_named_ranges_syncs_or_operators():
    """On an H100 the summary counted the device-side spans of named ranges, sync waits and operators' host
    entries with the kernels: 18.7 s of "kernels" in a step of 8.8 s wall."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEventAvg

    from pdbgym.train.grpo.steptrace import kernel_seconds

    def entry(key: str, device_us: float, device_type: DeviceType, annotation: bool = False) -> FunctionEventAvg:
        event = FunctionEventAvg()
        event.key, event.self_device_time_total, event.device_type = key, device_us, device_type
        event.is_user_annotation = annotation
        return event

    averages = [entry("nvjet_sm90_tst_64x8", 2.0e6, DeviceType.CUDA), entry("elementwise_kernel", 0.5e6, DeviceType.CUDA),
                entry("aten::mm", 2.0e6, DeviceType.CPU),  # the same kernels' time, seen from the host
                entry("pdbgym/prepare", 6.4e6, DeviceType.CUDA, annotation=True), entry("Stream Sync", 1.1e6, DeviceType.CUDA)]
    assert kernel_seconds(averages) == 2.5


def test_no_cudnn_attention_holds_for_the_run_and_the_processs_setting_comes_back(tmp_path, monkeypatch):
    """The switch is process-wide in torch; an experiment runs GRPO and then its held-out campaign in one
    process, so the run's setting must not outlive the run. Off is the default (measured faster)."""
    import torch

    from pdbgym.train.experiment.config import GRPOSettings
    from pdbgym.train.grpo.config import GRPORunConfig
    from pdbgym.train.grpo.run import train_grpo

    assert GRPORunConfig.__dataclass_fields__["cudnn_attention"].default is False
    assert GRPOSettings.__dataclass_fields__["cudnn_attention"].default is False

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    model, tasks = make_toy_model(tmp_path / "toy-model"), make_toy_tasks(tmp_path / "toy-tasks")
    seen = []
    before = torch.backends.cuda.cudnn_sdp_enabled()
    train_grpo(toy_config(tmp_path / "run", model, tasks, steps=1, save_steps=1, cudnn_attention=False),
               on_log=lambda row: seen.append(torch.backends.cuda.cudnn_sdp_enabled()), play=toy_play)
    assert seen and not any(seen)
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
