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
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pdbgym.adapters.stacked import materialize_ref
from pdbgym.adapters.store import Store
from pdbgym.agent.build import CacheBuildConfig, build_cache
from pdbgym.agent.executor import ExecutorConfig
from pdbgym.episode_defaults import DEMO_MAX_CONTEXT_TOKENS, DEMO_MAX_NEW_TOKENS, DEMO_TURN_BUDGET, EPISODE
from pdbgym.errors import PdbgymError
from pdbgym.evaluate.procedures import EvalConfig, run_evaluation
from pdbgym.fileio import write_json_atomic
from pdbgym.tasks.splits import load_splits, make_splits, write_splits
from pdbgym.tasks.suites import resolve_tasks
from pdbgym.train.corpus.build import MANIFEST_FILE, CorpusConfig, build_corpus
from pdbgym.train.demo.report import oracle_kl, write_demo_report
from pdbgym.train.sft.config import SFTTrainConfig
from pdbgym.train.sft.trainer import ADAPTER_DIR, TRAIN_RECORD, train_sft

STATE_FILE = "demo.json"
ADAPTER_NAME = "demo-sft"
Say = Callable[[str], None]


@dataclass
class DemoConfig:
    """The demo's budget; defaults fit about 10 minutes on 2 CPU cores (docs/benchmarks.md).

    Args:
        out: demo folder; a rerun reuses every finished phase. Default ``runs/demo``.
        base: the student: ``embedded`` (SmolLM2-135M-Instruct) or a HF model folder. Default ``embedded``.
        teacher: ``scripted`` (oracle: replays the reference fix), ``embedded``, a model folder or a URL.
        tasks: suite or folder split into train and held-out. Default ``builtin`` (21 tasks).
        held_out: share of tasks (whole source-module groups) held out for evaluation. Default 0.25.
        seed: seed of the split, the caches, SFT and sampling. Default 0.
        sft_steps: optimizer steps of SFT (one example per step). Default 12.
        sft_tokens: each example cut to its first N ids (prompt ~720 + first tool calls). Default 1024.
        rank: LoRA rank r (alpha 2r). Default 16.
        lr: peak AdamW learning rate, linear decay. Default 1e-3 (a short run).
        eval_runs: episodes per held-out task per arm. Default 1.
        turn_budget: tool calls per held-out episode (the oracle uses 8 on each built-in task). Default 8.
        max_new_tokens: token cap of one model turn (a pdb call is 20-60 tokens). Default 64.
        constrained: add the base model with grammar-constrained tool calls as an arm. Default False.
        kl_tokens: KL scored on the first N ids of each held-out oracle episode (0: whole). Default 1024.
        workers: episodes at once (scripted ones in worker processes; 1: all in this process). Default 2.
        threads: torch threads of training and KL scoring (episodes use 1). Default 2.
    """

    out: Path = Path("runs/demo")
    base: str = "embedded"
    teacher: str = "scripted"
    tasks: str = "builtin"
    held_out: float = 0.25
    seed: int = 0
    sft_steps: int = 12
    sft_tokens: int = 1024
    rank: int = 16
    lr: float = 1e-3
    eval_runs: int = 1
    turn_budget: int = DEMO_TURN_BUDGET
    max_new_tokens: int = DEMO_MAX_NEW_TOKENS
    constrained: bool = False
    kl_tokens: int = 1024
    workers: int = 2
    threads: int = 2


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
    return {k: str(v) for k, v in asdict(config).items()}


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def split_tasks(config: DemoConfig) -> dict[str, list[str]]:
    """``OUT/splits.json`` (train / test) and the two task folders; returns split -> instance ids."""
    out = Path(config.out)
    splits_file = out / "splits.json"
    if not splits_file.is_file():
        data = make_splits(config.tasks, val_fraction=0.0, test_fraction=config.held_out, seed=config.seed)
        write_splits(data, splits_file)
    splits = load_splits(splits_file)
    ids = {name: [item["instance_id"] for item in splits.get(name, [])] for name in ("train", "test")}
    if not ids["train"] or not ids["test"]:
        raise PdbgymError(f"{splits_file}: the demo needs tasks in both train and test ({len(ids['train'])} and "
                          f"{len(ids['test'])}); give more tasks or another --held-out share")
    by_id = {task.instance_id: task for task in resolve_tasks(config.tasks)}
    for name, wanted in ids.items():
        folder = out / "tasks" / name
        if folder.is_dir() and sorted(p.name for p in folder.iterdir()) == sorted(wanted):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        for instance_id in wanted:
            shutil.copytree(by_id[instance_id].path, folder / instance_id, symlinks=True)
    return ids


def build_caches(config: DemoConfig, tick: Callable[[], None]) -> dict[str, dict[str, Any]]:
    """Teacher caches on the train and held-out tasks (a rerun plays only missing episodes)."""
    summaries = {}
    for name in ("train", "test"):
        cache = CacheBuildConfig(policy=config.teacher, out=Path(config.out) / f"cache-{name}",
                                 tasks=str(Path(config.out) / "tasks" / name), runs=1, workers=config.workers, seed=config.seed,
                                 tokenizer=config.base,
                                 temperature=0.0 if config.teacher == "scripted" else 0.7)
        summaries[name] = build_cache(cache, on_result=lambda result, total: tick())
    return summaries


def build_demo_corpus(config: DemoConfig) -> dict[str, Any]:
    """The SFT corpus of the train cache: solved episodes, cut to ``sft_tokens`` ids (held-out refused)."""
    out = Path(config.out)
    manifest = out / "corpus" / MANIFEST_FILE
    if not manifest.is_file():
        build_corpus(CorpusConfig(caches=[out / "cache-train"], out=out / "corpus", solved_only=True,
                                  max_length=config.sft_tokens, overlength="truncate", splits=out / "splits.json"))
    built = json.loads(manifest.read_text())
    if not built["examples_kept"]:
        raise PdbgymError(f"the teacher {config.teacher!r} solved no train task ({built['dropped']}): there is "
                          "nothing to imitate; try another --teacher")
    return built


def sft_done(config: DemoConfig) -> bool:
    return (Path(config.out) / "sft" / ADAPTER_DIR / TRAIN_RECORD).is_file()


def train_demo_sft(config: DemoConfig, on_log: Callable[[dict[str, Any], int], None]) -> dict[str, Any]:
    """LoRA SFT of the embedded model on the corpus, or the finished run's record; returns the record."""
    import torch  # optional: torch (pdbgym[hf])

    out = Path(config.out) / "sft"
    if not sft_done(config):
        import datasets  # optional: datasets (pdbgym[train])

        datasets.disable_progress_bars()  # per-dataset bars; the demo's own progress covers the phase
        shutil.rmtree(out, ignore_errors=True)  # a killed run's checkpoints are of a run that no longer resumes
        torch.set_num_threads(config.threads)
        train_sft(SFTTrainConfig(base=config.base, data=Path(config.out) / "corpus", out=out, seed=config.seed,
                                 rank=config.rank, use_dora=False, lr=config.lr, effective_batch=1,
                                 max_steps=config.sft_steps, max_length=config.sft_tokens,
                                 max_tokens_per_example=config.sft_tokens, val_fraction=0.2,
                                 eval_steps=max(1, config.sft_steps // 4), device="cpu", name=ADAPTER_NAME,
                                 store=Path(config.out) / "adapters", report=True), on_log=on_log)
    return json.loads((out / ADAPTER_DIR / TRAIN_RECORD).read_text())


def sft_model_folder(config: DemoConfig) -> Path:
    """The SFT adapter merged into the base (``$PDBGYM_HOME/merged/<id>``, made once)."""
    return materialize_ref(ADAPTER_NAME, Store(Path(config.out) / "adapters"))


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
    with phases.run("sft", sft_done(config)):
        record = train_demo_sft(config, lambda row, total: bars.update(bar, completed=row["step"]))
        sft_folder = sft_model_folder(config)
        bars.update(bar, completed=record["steps"])
    arms = demo_arms(config, sft_folder)
    kl: dict[str, Any] | None = None
    if config.teacher == "scripted":
        with phases.run("kl", (out / "kl.json").is_file()):
            torch.set_num_threads(config.threads)
            kl = oracle_kl(out / "cache-test", arms, out / "kl.json", config.kl_tokens)
    torch.set_num_threads(1)  # the model shares two cores with sandboxed pytest runs during episodes
    episodes = len(ids["test"]) * config.eval_runs * len(arms)
    bar = bars.add_task("held-out episodes", total=episodes)
    evaluation = EvalConfig(arms=[f"{k}={v}" for k, v in arms.items()], tasks=config.tasks, split="test",
                            splits=out / "splits.json", runs=config.eval_runs, out=out / "eval",
                            turn_budget=config.turn_budget, max_new_tokens=config.max_new_tokens,
                            max_context_tokens=DEMO_MAX_CONTEXT_TOKENS, temperature=EPISODE.temperature,
                            executor=ExecutorConfig(workers=config.workers), json_out=out / "eval-summary.json",
                            teacher_cache=None if config.teacher == "scripted" else out / "cache-test",
                            title="pdbgym demo: held-out evaluation")
    played = out / "eval" / "episodes.jsonl"
    with phases.run("eval", played.is_file() and len(played.read_text().splitlines()) >= episodes):
        summary = run_evaluation(evaluation, lambda row: bars.advance(bar)).summary
        bars.update(bar, completed=episodes)
    phases.save(config)
    page = write_demo_report(config, out, arms, summary, record, corpus, caches, kl, phases.now)
    phases.save(config)
    return DemoOutcome(page, page.with_suffix(".md"), phases.now)
