"""``pdbgym demo``: the research loop in miniature, on CPU, on the embedded SmolLM2-135M-Instruct.

Phases (each resumes or reuses its output when the demo folder already holds it):

1. ``split``: the tasks split deterministically (``tasks.splits.make_splits``, seed 0) into train and a
   held-out ``test`` split; the two are copied into ``OUT/tasks/{train,test}``.
2. ``teacher``: a teacher cache on the train tasks (``agent.build.build_cache``) and one on the held-out
   tasks (for KL only). The default teacher ``scripted`` is an oracle that replays each task's
   reference fix; any model or server URL can be given instead.
3. ``corpus``: token-exact SFT examples from the train cache, each cut to its first ``sft_tokens`` ids
   (the prompt and the first tool calls: what a base model gets wrong first).
4. ``sft``: a LoRA adapter on SmolLM2-135M by ``train.sft.trainer.train_sft`` within ``sft_steps`` optimizer
   steps, validation loss on a held-out slice of the train tasks, registered in ``OUT/adapters``.
5. ``kl``: per arm with a local model, KL(teacher || arm) on the held-out teacher cache. A scripted
   teacher is deterministic (probability 1 on each token it wrote), so its KL to an arm is exactly the
   arm's mean negative log-prob of the oracle's tokens (nats/token), scored here with the divergence
   library's scorer; a model teacher's cache goes through ``eval --teacher-cache`` instead.
6. ``eval``: base vs SFT (and the oracle, and optionally the grammar-constrained base) on the held-out
   tasks (``evaluate.procedures.run_evaluation``), then one report (``train.demo.report``).

This module runs the phases in order, times them and plays the eval; the work of the others is
``demo.data`` (split, teacher, corpus), ``demo.finetune`` (sft) and ``demo.report`` (kl, the report).
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pdbgym.agent.executor import ExecutorConfig
from pdbgym.errors import PdbgymError
from pdbgym.evaluate.procedures import EvalConfig, run_evaluation
from pdbgym.fileio import write_json_atomic
from pdbgym.train.demo.config import DemoConfig
from pdbgym.train.demo.data import build_caches, build_demo_corpus, split_tasks
from pdbgym.train.demo.finetune import sft_done, sft_model_folder, train_demo_sft
from pdbgym.train.demo.report import oracle_kl, write_demo_report
from pdbgym.train.quiet import quiet_future_warnings

STATE_FILE = "demo.json"
Say = Callable[[str], None]


@dataclass
class DemoOutcome:
    """The report pages and where the phases' wall time went (seconds, this invocation)."""

    page: Path
    markdown: Path
    phases: dict[str, dict[str, Any]]


class _Phases:
    """Phase timings kept in ``OUT/demo.json`` so a rerun can say which phases it reused."""

    def __init__(self, out: Path, say: Say, config: DemoConfig) -> None:
        self.path, self.say = out / STATE_FILE, say
        old = json.loads(self.path.read_text()) if self.path.is_file() else {}
        now = _settings(config)
        changed = {k: (v, now.get(k)) for k, v in old.get("config", {}).items() if k != "out" and now.get(k) != v}
        if changed:  # reusing phases made with other settings would report them as this run's
            listed = ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in changed.items())
            raise PdbgymError(f"{out} holds a demo run with other settings ({listed}); give another --out or "
                              "remove that folder")
        self.first = old.get("phases", {})
        self.now: dict[str, dict[str, Any]] = {}

    @contextmanager
    def run(self, name: str, reused: bool) -> Iterator[None]:
        self.say(f"[{name}] " + ("reusing what an earlier run finished" if reused else "started"))
        started, cpu = time.perf_counter(), _cpu_seconds()
        yield
        seconds = round(time.perf_counter() - started, 1)
        earlier = self.first.get(name, {}) if reused else {}
        # CPU seconds (this process and its finished children) say what the phase costs on a quiet
        # machine; wall seconds on a shared one depend on everyone else's load.
        cpu = round(_cpu_seconds() - cpu, 1)
        self.now[name] = {"seconds": seconds, "cpu_seconds": cpu, "reused": reused,
                          "first_seconds": earlier.get("first_seconds") if reused else seconds,
                          "first_cpu_seconds": earlier.get("first_cpu_seconds") if reused else cpu}
        self.say(f"[{name}] done in {seconds:.1f} s")

    def save(self, config: DemoConfig) -> None:
        write_json_atomic(self.path, {"config": _settings(config),
                                      "phases": {**self.first, **self.now}, "load_average": list(os.getloadavg())})


def _settings(config: DemoConfig) -> dict[str, str]:
    """The settings ``demo.json`` holds, the episode's flat (as folders of earlier runs hold them)."""
    settings = asdict(config)
    settings.update(settings.pop("episode"))
    return {k: str(v) for k, v in settings.items()}


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def demo_arms(config: DemoConfig, sft_folder: Path) -> dict[str, str]:
    """Arm name -> model spec of the held-out evaluation."""
    arms = {"base": config.base, "sft": str(sft_folder), "oracle": "scripted"}
    if config.constrained:
        arms["base-constrained"] = f"constrained:{config.base}"
    return arms


def run_demo(config: DemoConfig, say: Say, bars: Any) -> DemoOutcome:
    """All phases in order (see the module docstring); ``bars`` is a ``pdbgym.progress.progress`` task set."""
    import torch  # optional: torch (pdbgym[hf])

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    phases = _Phases(out, say, config)
    with phases.run("split", (out / "splits.json").is_file()):
        ids = split_tasks(config)
    say(f"[split] {len(ids['train'])} train tasks, {len(ids['test'])} held-out tasks")
    bar = bars.add_task("teacher episodes", total=len(ids["train"]) + len(ids["test"]))
    with phases.run("teacher", (out / "cache-test" / "manifest.json").is_file()):
        caches = build_caches(config, lambda: bars.advance(bar))
        bars.update(bar, completed=len(ids["train"]) + len(ids["test"]))  # episodes an earlier run played
    with phases.run("corpus", (out / "corpus" / "corpus.json").is_file()):
        corpus = build_demo_corpus(config)
    bar = bars.add_task("sft steps", total=config.sft_steps)
    with phases.run("sft", sft_done(config)), quiet_future_warnings():  # TRL/transformers notices: this phase only
        record = train_demo_sft(config, lambda row, total: bars.update(bar, completed=row["step"]))
        sft_folder = sft_model_folder(config)
        bars.update(bar, completed=record["steps"])
    arms = demo_arms(config, sft_folder)
    kl: dict[str, Any] | None = None
    if config.teacher == "scripted":
        with phases.run("kl", (out / "kl.json").is_file()), quiet_future_warnings():
            torch.set_num_threads(config.threads)
            kl = oracle_kl(out / "cache-test", arms, out / "kl.json", config.kl_tokens)
    torch.set_num_threads(1)  # the model shares two cores with sandboxed pytest runs during episodes
    episodes = len(ids["test"]) * config.eval_runs * len(arms)
    bar = bars.add_task("held-out episodes", total=episodes)
    evaluation = EvalConfig(arms=[f"{k}={v}" for k, v in arms.items()], tasks=config.tasks, split="test",
                            splits=out / "splits.json", runs=config.eval_runs, out=out / "eval",
                            episode=config.episode, executor=ExecutorConfig(workers=config.workers), json_out=out / "eval-summary.json",
                            teacher_cache=None if config.teacher == "scripted" else out / "cache-test",
                            title="pdbgym demo: held-out evaluation")
    played = out / "eval" / "episodes.jsonl"
    with phases.run("eval", played.is_file() and len(played.read_text().splitlines()) >= episodes), \
            quiet_future_warnings():
        summary = run_evaluation(evaluation, lambda row: bars.advance(bar)).summary
        bars.update(bar, completed=episodes)
    phases.save(config)
    page = write_demo_report(config, out, arms, summary, record, corpus, caches, kl, phases.now)
    phases.save(config)
    return DemoOutcome(page, page.with_suffix(".md"), phases.now)
