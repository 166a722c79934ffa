"""One GRPO step under ``torch.profiler`` (``train grpo --trace-step N``): where its time goes, kernel by kernel.

The step's timers (``timing.py``, the engine's stats) say how long each part took; a trace says what ran in
it and where the device sat idle. The callback starts the profiler when optimizer step N begins (its
rollouts, scoring, update and optimizer step all fall inside) and stops it when the step ends. It writes,
under ``OUT/trace/``:

- ``step-N.json.gz``: the Chrome trace (open it in Perfetto or ``chrome://tracing``);
- ``step-N.txt``: the step's wall seconds; on a GPU, the seconds of kernels summed and that sum over the wall
  (how busy the card was, an upper bound where streams overlap); then the operators by self device time
  and by self CPU time (``key_averages``), each table cut to its top rows.

Every thread is traced (the engine decodes in its own). The parts the step's timers know are named ranges
in it: ``pdbgym/<part>`` (``UpdateClock.timed``) and ``pdbgym/engine/<part>`` (``engine.cuda.traced``).
Profiling slows the step it traces (every operator is recorded), so its seconds are not the run's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdbgym.fileio import write_text_atomic

if TYPE_CHECKING:  # annotations only: transformers loads with the trainer
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

TRACE_DIR = "trace"
ROWS = 25


SYNCS = ("Context Sync", "Stream Sync", "Event Sync", "Stream Wait Event")  # the profiler's CUDA sync events


def kernel_seconds(averages: Any) -> float:
    """Seconds of device kernels in the trace, summed: the device's own entries, less the device-side spans of
    named ranges (``pdbgym/...``: they cover whatever ran meanwhile) and the sync events (waits, not work).
    Counted with the kernels, those made the sum several times the wall. An operator's host entry carries
    its kernels' time too, so host entries are left out, as torch's own table total does."""
    from torch.autograd import DeviceType  # optional: torch (pdbgym[hf])

    return sum(e.self_device_time_total for e in averages
               if e.device_type != DeviceType.CPU and not e.is_user_annotation and e.key not in SYNCS) / 1e6


def summary(profiler: Any, wall_s: float, cuda: bool) -> str:
    """The text of ``step-N.txt`` from a stopped ``torch.profiler.profile``."""
    averages = profiler.key_averages()
    lines = [f"wall seconds: {wall_s:.3f}"]
    if cuda:
        device_s = kernel_seconds(averages)
        lines.append(f"device kernels, summed: {device_s:.3f} s ({device_s / max(wall_s, 1e-9):.1%} of the wall; "
                     "syncs and named ranges left out)")
        lines += ["", "by self device time:", averages.table(sort_by="self_device_time_total", row_limit=ROWS)]
    lines += ["", "by self CPU time:", averages.table(sort_by="self_cpu_time_total", row_limit=ROWS)]
    return "\n".join(lines) + "\n"


def every_thread_profiler() -> Any:
    """A ``torch.profiler.profile`` (not started) of the CPU and, where there is one, the GPU, recording every
    thread's operators (the engine decodes in its own, started before the trace) and the CUDA sync events
    (the host's waits); a torch without those options records this thread's operators and the kernels."""
    import torch  # optional: torch (pdbgym[hf])

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    try:
        config = torch.profiler._ExperimentalConfig(profile_all_threads=True, enable_cuda_sync_events=True)
    except (AttributeError, TypeError):
        config = None
    return torch.profiler.profile(activities=activities, experimental_config=config)


def step_trace(out: Path, step: int) -> TrainerCallback:
    """A ``TrainerCallback`` profiling optimizer step ``step`` (1-based, as ``steps.jsonl`` numbers them)."""
    import torch  # optional: torch (pdbgym[hf])
    from transformers import TrainerCallback  # optional: transformers (pdbgym[hf])

    from pdbgym.engine.cuda import synchronize  # imports torch

    class StepTrace(TrainerCallback):
        profiler: Any = None
        started = 0.0

        def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                          **kwargs: object) -> None:
            if self.profiler is not None or state.global_step + 1 != step or not state.is_world_process_zero:
                return
            self.profiler = every_thread_profiler()
            self.profiler.start()
            self.started = time.perf_counter()

        def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                        **kwargs: object) -> None:
            if self.started == 0.0:  # not this step, or traced already
                return
            cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
            if cuda:
                synchronize()  # the engine's sync: waits out a graph capture in its thread
            wall = time.perf_counter() - self.started
            self.profiler.stop()
            self.started = 0.0  # traced once
            folder = out / TRACE_DIR
            folder.mkdir(parents=True, exist_ok=True)
            # The table first: a whole step's Chrome trace takes long to write, and a run stopped meanwhile
            # (a job's time limit) still leaves the table
            write_text_atomic(folder / f"step-{step}.txt", summary(self.profiler, wall, cuda))
            partial = folder / f".step-{step}.part.json.gz"  # the profiler gzips a path ending in .gz
            self.profiler.export_chrome_trace(str(partial))
            partial.replace(folder / f"step-{step}.json.gz")

    return StepTrace()
