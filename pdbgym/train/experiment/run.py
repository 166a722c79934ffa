"""``pdbgym experiment run``: one experiment end to end, resumable after a kill.

Stages, in order (``OUT/experiment.json`` records the finished ones; a rerun skips them, and the stages
that hold their own progress resume inside: cache builds, GRPO, the evaluation campaign):

1. ``tasks``: the families' tasks written and the suites copied into ``OUT/tasks/all``, each task's family
   or suite in ``OUT/tasks/sets.json``;
2. ``split``: ``OUT/splits.json``, train / val / test by source module, stratified by rung, the sets of
   ``[split] test_only`` all in test, copied into
   ``OUT/tasks/{train,val,test}``;
3. ``oracle``: scripted-oracle caches on the train split (the SFT data) and on the test split (for KL);
4. ``sft``: the token-exact corpus of the solved train episodes, then SFT of the base (``NAME-sft``), or
   one SFT run per ``[sft] candidates`` step count (``NAME-sft-sN``), each played on the val split, the
   one whose val pass@1 is nearest ``[sft] target`` chosen (``OUT/sft/choice.json``);
5. ``grpo``: GRPO from the (chosen) SFT model on the train split (or ``[grpo] tasks`` of its tasks, copied into
   ``OUT/tasks/grpo``), replay seed and BC anchor from the corpus, every ``save_steps`` checkpoint gated
   on the val split; the val-best one is chosen (``NAME-grpo``);
6. ``matched``: the imitation control (``sft-matched``), SFT continued on what GRPO's stage imitated;
7. ``eval``: the primary held-out campaign, at ``[eval] temperature``: base, SFT, GRPO and the oracle on
   the test split (pass@1 and pass@k with task-clustered CIs, paired comparisons), valid-call rates, KL to
   the oracle, sampled entropy;
8. ``temperatures``: the trained arms again at each of ``[eval] temperatures`` (``--until eval`` stops
   before it, so several seeds sharing a machine each get their figures first);
9. ``report``: ``OUT/report.md`` (``experiment.report``).

An output folder made with other settings is refused (the settings' digest is kept), so a resumed run
never mixes two experiments.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from pdbgym.adapters.stacked import StageCopies
from pdbgym.adapters.store import Store
from pdbgym.agent.build import CacheBuildConfig, build_cache
from pdbgym.agent.executor import ExecutorConfig
from pdbgym.episode_defaults import EpisodeSettings, episode_defaults_for
from pdbgym.evaluate.arm_figures import oracle_kl, tool_call_validity
from pdbgym.evaluate.procedures import EvalConfig, run_evaluation
from pdbgym.evaluate.selection import SelectionLedger, record_selection
from pdbgym.fileio import read_jsonl, write_json_atomic
from pdbgym.modelload import device_problem
from pdbgym.tasks.families import write_family
from pdbgym.tasks.splits import load_splits, make_splits, write_splits
from pdbgym.tasks.suites import resolve_tasks
from pdbgym.train.checkpoints import checkpoint_step, last_complete_checkpoint
from pdbgym.train.corpus.build import MANIFEST_FILE, CorpusConfig, build_corpus, load_corpus, split_by_task
from pdbgym.train.experiment.arms import best_on_val, read_matched, write_matched_corpus
from pdbgym.train.experiment.config import SFT_CHOICE_FILE, ExperimentConfig, ExperimentError
from pdbgym.train.experiment.heldout import (
    ENTROPY_FILE,
    TASK_SETS_FILE,
    arms_at,
    campaign_paths,
    extra_temperatures,
    label,
    sampled_entropy,
    task_sets,
)
from pdbgym.train.experiment.report import write_experiment_report
from pdbgym.train.experiment.stagebars import StageBars
from pdbgym.train.grpo.config import GRPORunConfig
from pdbgym.train.grpo.run import train_grpo
from pdbgym.train.grpo.trainer import OUTCOMES_FILE, RECIPE_STATE_FILE, STEPS_FILE
from pdbgym.train.quiet import quiet_future_warnings
from pdbgym.train.sft.config import SFTTrainConfig
from pdbgym.train.sft.resume import is_finished, read_train_record
from pdbgym.train.sft.trainer import train_sft

STATE_FILE = "experiment.json"
LEDGER_FILE = "ledger.jsonl"  # the experiment's selection ledger: the SFT choice and GRPO's checkpoint choice
STAGES = ("tasks", "split", "oracle", "sft", "grpo", "matched", "eval", "temperatures", "report")
GRPO_SKIPPED = "[grpo] steps = 0 (the file plays no GRPO, so no sft-matched control either)"
TRAINING_STAGES = ("sft", "grpo", "matched")  # their libraries' FutureWarnings are hidden while they run
Say = Callable[[str], None]


class _State:
    def __init__(self, out: Path, config: ExperimentConfig) -> None:
        self.path = out / STATE_FILE
        old = json.loads(self.path.read_text()) if self.path.is_file() else {}
        if old and old.get("digest") != config.digest():
            changed = ", ".join(changed_settings(old.get("config", {}), config.to_dict())) or "settings digest " \
                f"{old.get('digest')} -> {config.digest()}"
            raise ExperimentError(f"{out} holds experiment {old.get('name')!r} run with other settings ({changed}); "
                                  "give another --out, or remove that folder")
        self.data = old or {"name": config.name, "digest": config.digest(), "config": config.to_dict(),
                            "source": config.source, "stages": {}}

    def done(self, stage: str) -> bool:
        return stage in self.data["stages"]

    def finish(self, stage: str, seconds: float, facts: dict[str, Any] | None = None) -> None:
        self.data["stages"][stage] = {"seconds": round(seconds, 1), **(facts or {})}
        write_json_atomic(self.path, self.data)


def changed_settings(old: dict[str, Any], new: dict[str, Any], where: str = "") -> list[str]:
    """``table.key: old -> new`` for each setting that differs between two ``ExperimentConfig.to_dict()``."""
    found = []
    for key in dict.fromkeys([*old, *new]):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict) and key != "departures":
            found += changed_settings(a, b, f"{where}{key}.")
        elif a != b:
            found.append(f"{where}{key}: {a!r} -> {b!r}")
    return found


def run_experiment(config: ExperimentConfig, out: Path, device: str = "cpu", workers: int = 2,
                   say: Say = print, until: str | None = None, minutes: float = 0.0, progress: Any = None,
                   local_episodes: int = 0, local_processes: int = 1) -> Path:
    """Every stage not yet finished in ``out`` (up to and including ``until`` when given; the report is
    then written from what is there); returns the report's path.

    ``minutes`` (0: none) is this invocation's wall-clock budget, as a job scheduler's time limit: once
    it is spent no further stage starts, and GRPO pauses at a gated checkpoint (unchosen, unregistered)
    for the next invocation to resume; the report is written from what is there. A stage already
    running otherwise runs to its end. ``progress``: a ``pdbgym.progress`` task set the long stages show
    their episodes and steps on (None: none). ``workers``, ``local_episodes`` and ``local_processes`` say
    how episodes run (``ExecutorConfig``: scripted ones in worker processes, a local model's that many at
    once with their turns batched, 0: 48 on a GPU, 1 on CPU, in that many processes each with its own copy
    of the model); each episode's seed is its own, so none of them changes a result."""
    if until is not None and until not in STAGES:
        raise ExperimentError(f"--until {until!r}: the stages are {', '.join(STAGES)}")
    if (problem := device_problem(device)) is not None:
        raise ExperimentError(problem)
    out.mkdir(parents=True, exist_ok=True)
    state = _State(out, config)
    clock, bars = time.monotonic(), StageBars(progress)
    executor = ExecutorConfig(workers=workers, local_episodes=local_episodes, local_processes=local_processes)

    def left() -> float:  # minutes of the budget left (inf without one)
        return minutes - (time.monotonic() - clock) / 60 if minutes > 0 else float("inf")

    steps: dict[str, Callable[[], dict[str, Any] | None]] = {
        "tasks": lambda: _tasks(config, out), "split": lambda: _split(config, out),
        "oracle": lambda: _oracle(config, out, executor, bars),
        "sft": lambda: _sft(config, out, device, executor, say, bars),
        "grpo": lambda: _grpo(config, out, device, left()), "matched": lambda: _matched(config, out, device),
        "eval": lambda: _eval(config, out, device, executor, say, bars),
        "temperatures": lambda: _temperatures(config, out, device, executor, say, bars),
        "report": lambda: {"report": str(write_experiment_report(config, out, state.data))}}
    wanted = STAGES if until is None else (*STAGES[:STAGES.index(until) + 1], "report")
    for stage in dict.fromkeys(wanted):
        if state.done(stage) and stage != "report":
            say(f"[{stage}] finished earlier")
            continue
        if stage != "report" and left() <= 0:
            say(f"[{stage}] not started: the {minutes:g}-minute budget (--minutes) is spent; run again to go on")
            return write_experiment_report(config, out, state.data)  # what is there; unrecorded
        if stage in ("grpo", "matched") and not config.grpo.steps:
            state.finish(stage, 0.0, {"skipped": GRPO_SKIPPED})
            say(f"[{stage}] skipped: {GRPO_SKIPPED}")
            continue
        say(f"[{stage}] started" + (f": {what}" if (what := stage_summary(stage, config, out, device)) else ""))
        started = time.perf_counter()
        with quiet_future_warnings() if stage in TRAINING_STAGES else nullcontext():  # for this stage only
            facts = steps[stage]()
        if facts is None:  # GRPO paused by the budget
            say(f"[{stage}] paused after {time.perf_counter() - started:.1f} s by the {minutes:g}-minute budget "
                "(--minutes); run again to resume it")
            return write_experiment_report(config, out, state.data)  # what is there; unrecorded
        state.finish(stage, time.perf_counter() - started, facts)
        say(f"[{stage}] done in {time.perf_counter() - started:.1f} s")
    return out / "report.md"


def stage_summary(stage: str, config: ExperimentConfig, out: Path, device: str) -> str | None:
    """What a training stage does, for its start line (None for the other stages)."""
    s, g = config.sft, config.grpo
    if stage == "sft":
        start = "GRPO starting from the best" if s.start == "best" else f"GRPO starting from the one nearest {s.target:g}"
        runs = (f"one run per step count in {list(s.candidates)}, each played on val, {start}"
                if s.candidates else f"{s.epochs:g} epochs" if s.epochs else f"{s.steps} steps")
        return (f"{'DoRA' if s.use_dora else 'LoRA'} SFT (rank {s.rank}) of {config.base} on the oracle's solved train "
                f"episodes, {runs}, on {device}")
    if stage == "grpo":
        chosen = not s.candidates or (out / "sft" / SFT_CHOICE_FILE).is_file()
        policy = sft_name(config, out) if chosen else "the chosen SFT model"
        return (f"GRPO of {policy}: {g.steps} steps of {g.tasks_per_step} task(s) x {g.group} episodes, a "
                f"checkpoint gated on val every {g.save_steps} steps, on {device}")
    if stage == "matched":
        return ("SFT continued from GRPO's start on the replayed and anchor examples GRPO trained on, as many "
                f"updates, no reward (the sft-matched arm), on {device}")
    return None


def _tasks(config: ExperimentConfig, out: Path) -> dict[str, Any]:
    folder = out / "tasks" / "all"
    shutil.rmtree(folder, ignore_errors=True)
    sets: dict[str, str] = {}  # instance id -> the family or suite it came from, for the split and the report
    for name, count in sorted(config.tasks.families.items()):
        sets |= dict.fromkeys((path.name for path in write_family(name, count, folder, seed=config.tasks_drawn_with())), name)
    for suite in config.tasks.suites:
        for task in resolve_tasks(suite):
            shutil.copytree(task.path, folder / task.path.name, symlinks=True)
            sets[task.instance_id] = suite
    write_json_atomic(out / "tasks" / TASK_SETS_FILE, sets)
    return {"tasks": len(resolve_tasks(folder))}


def _split(config: ExperimentConfig, out: Path) -> dict[str, Any]:
    held = {instance_id for instance_id, name in task_sets(out).items() if name in config.split.test_only}
    data = make_splits(out / "tasks" / "all", config.split.val, config.split.test, seed=config.tasks_drawn_with(),
                       stratify="rung", test_only=held)
    write_splits(data, out / "splits.json")
    splits = load_splits(out / "splits.json")
    by_id = {task.instance_id: task for task in resolve_tasks(out / "tasks" / "all")}
    sizes = {}
    for name in ("train", "val", "test") if uses_val(config) else ("train", "test"):
        ids = [item["instance_id"] for item in splits.get(name, [])]
        if not ids:
            raise ExperimentError(f"the {name} split is empty ({len(by_id)} tasks); give more tasks or other "
                                  "[split] fractions")
        _write_task_folder(out / "tasks" / name, {instance_id: by_id[instance_id].path for instance_id in ids})
        sizes[name] = len(ids)
    return sizes


def uses_val(config: ExperimentConfig) -> bool:
    """Whether a stage plays the val split: the SFT choice among ``[sft] candidates``, or GRPO's gates."""
    return bool(config.sft.candidates or config.grpo.steps)


def _write_task_folder(folder: Path, tasks: dict[str, Path]) -> None:
    """``folder`` afresh, holding a copy of each task folder under its instance id (links copied as links)."""
    shutil.rmtree(folder, ignore_errors=True)
    for instance_id, path in tasks.items():
        shutil.copytree(path, folder / instance_id, symlinks=True)


def _episode(config: ExperimentConfig) -> EpisodeSettings:
    """The settings of the experiment's model episodes: [episodes], at [eval]'s temperature."""
    return replace(config.episodes, temperature=config.eval.temperature)


def _oracle(config: ExperimentConfig, out: Path, executor: ExecutorConfig,
            bars: StageBars | None = None) -> dict[str, Any]:
    facts = {}
    for name in ("train", "test"):
        plan, each = (bars or StageBars()).episodes(f"oracle episodes, {name}")
        summary = build_cache(CacheBuildConfig(
            policy="scripted", out=out / "caches" / f"oracle-{name}", tasks=str(out / "tasks" / name), runs=1,
            workers=executor.workers, seed=config.seed, tokenizer=config.base,
            episode=replace(episode_defaults_for("cache build"), temperature=0.0,
                            turn_budget=config.episodes.turn_budget,
                            max_context_tokens=config.episodes.max_context_tokens)), on_result=each, on_plan=plan)
        facts[name] = {k: summary.get(k) for k in ("episodes", "solved") if k in summary}
    return facts


def _sft(config: ExperimentConfig, out: Path, device: str, executor: ExecutorConfig, say: Say = print,
         bars: StageBars | None = None) -> dict[str, Any]:
    corpus = out / "corpus"
    if not (corpus / MANIFEST_FILE).is_file():
        build_corpus(CorpusConfig(caches=[out / "caches" / "oracle-train"], out=corpus, solved_only=True,
                                  max_length=config.sft.max_tokens, overlength="drop", splits=out / "splits.json"))
    built = json.loads((corpus / MANIFEST_FILE).read_text())
    if not built["examples_kept"]:
        raise ExperimentError(f"the oracle solved no train task within {config.sft.max_tokens} ids "
                              f"({built['dropped']}); raise [sft] max_tokens")
    if config.sft.candidates:
        return {"examples": built["examples_kept"], **_sft_choice(config, out, device, executor, say)}
    _train_sft(config, out, device, sft_steps(config, out), out / "sft", f"{config.name}-sft", bars)
    return {"examples": built["examples_kept"]}


def sft_steps(config: ExperimentConfig, out: Path) -> int:
    """The one SFT run's optimizer steps: ``[sft] steps``, or ``[sft] epochs`` passes over the corpus's
    training slice (the examples ``train_sft`` keeps after holding out its val tasks) at the effective batch."""
    if not config.sft.epochs:
        return config.sft.steps
    train, _ = split_by_task(load_corpus(out / "corpus").examples, config.sft.val_fraction, config.seed)
    return max(1, math.ceil(config.sft.epochs * len(train) / config.sft.effective_batch))


def _train_sft(config: ExperimentConfig, out: Path, device: str, steps: int, folder: Path, name: str,
               bars: StageBars | None = None) -> None:
    """One SFT run of ``steps`` steps into ``folder``, registered as ``name``; a finished one is kept."""
    if is_finished(folder):
        return
    shutil.rmtree(folder, ignore_errors=True)  # a killed run's checkpoints: SFT is short, start over
    train_sft(SFTTrainConfig(base=config.base, data=out / "corpus", out=folder, seed=config.seed,
                             rank=config.sft.rank, use_dora=config.sft.use_dora, lr=config.sft.lr,
                             effective_batch=config.sft.effective_batch,
                             max_steps=steps, max_length=config.sft.max_tokens,
                             max_tokens_per_example=config.sft.max_tokens, val_fraction=config.sft.val_fraction,
                             eval_steps=max(1, steps // 4), device=device, name=name, store=out / "adapters",
                             report=True), on_log=(bars or StageBars()).steps(f"sft steps, {name}"))


def _sft_choice(config: ExperimentConfig, out: Path, device: str, executor: ExecutorConfig,
                say: Say = print) -> dict[str, Any]:
    """One SFT run per ``[sft] candidates`` step count, each played on the val split at the eval
    temperature; the best on val is ``sft-best``, and GRPO's start is it or, with ``[sft] start = "target"``,
    the one whose val pass@1 is nearest ``[sft] target`` (``OUT/sft/choice.json``: ``best``, ``chosen``);
    the start's choice is recorded in the experiment's selection ledger. Finished runs, played episodes and a
    made choice are kept across a kill. The candidates' merged copies serve these val episodes only and are
    removed after them (the eval stage merges the chosen one again)."""
    folder, s = out / "sft", config.sft
    path = folder / SFT_CHOICE_FILE
    if not path.is_file():
        names = {steps: f"{config.name}-sft-s{steps}" for steps in s.candidates}
        for steps, name in names.items():
            _train_sft(config, out, device, steps, folder / f"steps-{steps}", name)
        copies = StageCopies(Store(out / "adapters"))
        run_evaluation(EvalConfig(
            arms=[f"s{steps}={copies.folder(name)}" for steps, name in names.items()],
            tasks=str(out / "tasks" / "val"), runs=s.val_runs, out=folder / "val-eval",
            episode=_episode(config), seed=config.seed, executor=executor,
            json_out=folder / "val-summary.json", device=device, title=f"{config.name}: SFT strength on val"))
        _say_removed(copies, "sft", say)
        arms = json.loads((folder / "val-summary.json").read_text())["arms"]
        scores = {steps: arms[f"s{steps}"]["pass@1"] for steps in names}
        means = {steps: block["mean"] for steps, block in scores.items()}
        best = best_on_val(means)
        chosen = best if s.start == "best" else nearest_to_target(means, s.target)
        losses = {steps: read_train_record(folder / f"steps-{steps}").get("best_val_loss") for steps in names}
        write_json_atomic(path, {"target": s.target, "start": s.start, "chosen": names[chosen], "steps": chosen,
                                 "best": names[best], "best_steps": best,
                                 "val_runs": s.val_runs, "val_tasks": arms[f"s{chosen}"]["pass@1"].get("n_tasks"),
                                 "candidates": {str(steps): {"name": names[steps], "pass@1": scores[steps],
                                                             "best_val_loss": losses[steps]} for steps in names}})
    choice = json.loads(path.read_text())
    _record_sft_choice(out, choice)
    return {"chosen": choice["chosen"], "steps": choice["steps"], "best": choice.get("best", choice["chosen"]),
            "val_pass@1": {steps: round(c["pass@1"]["mean"], 4) for steps, c in choice["candidates"].items()}}


def nearest_to_target(scores: dict[int, float], target: float) -> int:
    """The step count whose score is nearest ``target``; of equal distances, the most steps."""
    return min(scores, key=lambda steps: (abs(scores[steps] - target), -steps))


def _record_sft_choice(out: Path, choice: dict[str, Any]) -> None:
    """The SFT choice in the experiment's ledger, once (a rerun after a kill finds it there)."""
    candidates = choice["candidates"].values()
    scores = {c["name"]: float(c["pass@1"]["mean"]) for c in candidates}
    ses = [float(se) for c in candidates if (se := c["pass@1"].get("se")) is not None and se == se]
    val = [item["instance_id"] for item in load_splits(out / "splits.json").get("val", [])]
    record_selection("val", val, scores, sum(ses) / len(ses) if ses else 0.0, SelectionLedger(out / LEDGER_FILE),
                     chosen=choice["chosen"], once=True)


def sft_name(config: ExperimentConfig, out: Path, which: str = "chosen") -> str:
    """The adapter-store name of the SFT model GRPO starts from (``which="chosen"``) or of the best on val
    (``which="best"``; a folder from before the best was recorded: the start)."""
    if not config.sft.candidates:
        return f"{config.name}-sft"
    path = out / "sft" / SFT_CHOICE_FILE
    if not path.is_file():
        raise ExperimentError(f"{path} is missing: the sft stage chooses among [sft] candidates before GRPO and the "
                              "evaluation can start; run the experiment without --until, or from the sft stage")
    choice = json.loads(path.read_text())
    return str(choice.get(which, choice["chosen"]))


def _grpo(config: ExperimentConfig, out: Path, device: str, minutes_left: float) -> dict[str, Any] | None:
    """The GRPO stage; None when the invocation's budget paused it at a checkpoint (a rerun resumes)."""
    g = config.grpo
    last = last_complete_checkpoint(out / "grpo" / "checkpoints", RECIPE_STATE_FILE)
    if last is None:  # a run killed before its first checkpoint: nothing to resume, start over
        shutil.rmtree(out / "grpo", ignore_errors=True)
    cap = grpo_minutes_left(g.max_minutes, out / "grpo", last)
    record = train_grpo(GRPORunConfig(
        policy=sft_name(config, out), tasks=str(_grpo_tasks(config, out)), out=out / "grpo", group=g.group,
        tasks_per_step=g.tasks_per_step, steps=g.steps, seed=config.seed, lr=g.lr,
        max_new_tokens=config.episodes.max_new_tokens, max_context_tokens=config.episodes.max_context_tokens,
        budget_start=g.budget_start or config.episodes.turn_budget, budget_end=config.episodes.turn_budget,
        curriculum=g.curriculum, budget_ramp_steps=g.budget_ramp_steps,
        anchor_data=out / "corpus", anchor_weight=g.anchor_weight, replay_data=out / "corpus",
        replay_fraction=g.replay_fraction, save_steps=g.save_steps, max_minutes=cap,
        pause_after_minutes=0.0 if minutes_left == float("inf") else max(minutes_left, 1e-3),
        val_tasks=str(out / "tasks" / "val"), val_runs=g.val_runs, val_k=g.val_k, store=out / "adapters",
        ledger=out / LEDGER_FILE, name=f"{config.name}-grpo", device=device, resume=last is not None,
        register_without_signal=True, update_micro_batches=g.update_micro_batches,
        gradient_checkpointing=g.gradient_checkpointing, cudnn_attention=g.cudnn_attention,
        compile_decode=g.compile_decode, fused_dora=g.fused_dora, trace_step=min(g.trace_step, g.steps)))
    if record.get("paused"):
        return None
    return {"chosen": record["chosen"], "reward_signal_steps": record["reward_signal_steps"], "steps": record["steps"]}


def _matched(config: ExperimentConfig, out: Path, device: str) -> dict[str, Any]:
    """``sft-matched`` (``arms.py``): SFT continued from GRPO's start on the corpus examples GRPO's stage
    trained on beside its own samples, for as many updates, at GRPO's learning rate and adapter (read from
    its run record), no reward; registered as ``NAME-sft-matched``. A finished run is kept."""
    record = json.loads((out / "grpo" / "grpo_run.json").read_text())
    recipe, folder = record["recipe"], out / "matched"
    if not read_matched(out):
        write_matched_corpus(
            out / "corpus", read_jsonl(out / "grpo" / OUTCOMES_FILE).rows, folder,
            anchor=float(recipe["anchor_weight"]) if recipe.get("anchor_data") else 0.0,
            anchor_batch=int(recipe["anchor_batch"]), anchor_decay_steps=int(recipe["anchor_decay_steps"]),
            anchor_max_tokens=int(recipe["anchor_max_tokens"]), replay_max_tokens=int(recipe["max_context_tokens"]))
    facts = read_matched(out)
    if facts["examples"] and not is_finished(folder / "sft"):
        shutil.rmtree(folder / "sft", ignore_errors=True)
        train_sft(SFTTrainConfig(
            base=str(recipe["policy"]), data=folder / "corpus", out=folder / "sft", seed=config.seed,
            rank=int(recipe["rank"]), lora_alpha=int(recipe["alpha"]), use_dora=bool(recipe["use_dora"]),
            lr=float(recipe["lr"]), effective_batch=facts["effective_batch"], max_steps=facts["updates"],
            max_length=config.sft.max_tokens, max_tokens_per_example=config.sft.max_tokens, val_fraction=0.0,
            device=device, name=f"{config.name}-sft-matched", store=out / "adapters", report=True))
    return {"updates": facts["updates"], "replayed": facts["replayed"], "anchor": facts["anchor"],
            "effective_batch": facts["effective_batch"]}


def _grpo_tasks(config: ExperimentConfig, out: Path) -> Path:
    """The folder of tasks GRPO plays: the train split, or ``[grpo] tasks`` of them in ``OUT/tasks/grpo``."""
    train = out / "tasks" / "train"
    if not config.grpo.tasks:
        return train
    items = load_splits(out / "splits.json").get("train", [])
    ids = pick_by_rung({item["instance_id"]: int(item.get("rung", 0)) for item in items}, config.grpo.tasks,
                       config.seed)
    folder = out / "tasks" / "grpo"
    _write_task_folder(folder, {instance_id: train / instance_id for instance_id in ids})  # a resume: the same pick
    return folder


def pick_by_rung(rungs: dict[str, int], count: int, seed: int) -> list[str]:
    """``count`` of the tasks (instance id -> rung), each rung's share its share of the tasks (largest
    remainders), drawn within a rung by ``seed``; sorted."""
    if count > len(rungs):
        raise ExperimentError(f"[grpo] tasks = {count} exceeds the {len(rungs)} train task(s); lower it, or give "
                              "[tasks] more tasks")
    levels: dict[int, list[str]] = {}
    for instance_id, level in sorted(rungs.items()):
        levels.setdefault(level, []).append(instance_id)
    exact = {level: count * len(ids) / len(rungs) for level, ids in levels.items()}
    share = {level: int(value) for level, value in exact.items()}
    for level in sorted(exact, key=lambda lv: (share[lv] - exact[lv], lv))[:count - sum(share.values())]:
        share[level] += 1
    rng = random.Random(seed)
    return sorted(instance_id for level, ids in levels.items() for instance_id in rng.sample(ids, share[level]))


def grpo_minutes_left(max_minutes: float, folder: Path, last: str | None) -> float:
    """This invocation's share of ``[grpo] max_minutes`` (0: no cap): the cap less the logged time of
    the steps kept by the checkpoint it resumes from (steps after it are played again)."""
    if max_minutes <= 0:
        return 0.0
    rows = read_jsonl(folder / STEPS_FILE).rows
    kept = checkpoint_step(last) if last else 0
    spent = sum(float(r.get("step_time", 0.0)) for r in rows if int(r.get("step", 0)) <= kept) / 60
    return max(max_minutes - spent, 1e-3)


def arms_of(config: ExperimentConfig, out: Path, copies: StageCopies) -> dict[str, str]:
    """The held-out arms (``arms.py``): the base; ``sft-best``; ``sft-start`` when GRPO started from another
    SFT model; ``sft-matched`` when GRPO's stage had imitation to match; ``grpo`` unless ``[grpo] steps = 0``;
    the oracle. The models as merged folders made by ``copies``."""
    best, start = sft_name(config, out, "best"), sft_name(config, out)
    arms = {"base": config.base, "sft-best": str(copies.folder(best))}
    if start != best:
        arms["sft-start"] = str(copies.folder(start))
    if read_matched(out).get("examples"):
        arms["sft-matched"] = str(copies.folder(f"{config.name}-sft-matched"))
    if config.grpo.steps:
        arms["grpo"] = str(copies.folder(f"{config.name}-grpo"))
    return arms | {"oracle": "scripted"}


def _say_removed(copies: StageCopies, stage: str, say: Say) -> None:
    """Remove a stage's merged model copies, saying what they were and how big."""
    if line := copies.remove():
        say(f"[{stage}] {line}")


def _eval(config: ExperimentConfig, out: Path, device: str, executor: ExecutorConfig, say: Say = print,
          bars: StageBars | None = None) -> dict[str, Any]:
    """The primary held-out campaign (``[eval] temperature``: the experiment's figures), KL to the oracle,
    tool-call validity and each model arm's sampled entropy; the SFT and GRPO arms' merged copies serve
    these episodes only and are removed after them (a resumed eval merges them again)."""
    copies = StageCopies(Store(out / "adapters"))
    arms = arms_of(config, out, copies)
    models = {k: v for k, v in arms.items() if k != "oracle"}
    primary = config.eval.temperature
    found = _campaign(config, out, device, executor, arms, primary, bars)
    kl = oracle_kl(out / "caches" / "oracle-test", models, out / "kl.json", config.eval.kl_tokens, device=device)
    validity = tool_call_validity(out / "eval", arms)
    write_json_atomic(out / "validity.json", validity)
    _say_removed(copies, "eval", say)
    return {"arms": found, "kl": bool(kl)}


def _temperatures(config: ExperimentConfig, out: Path, device: str, executor: ExecutorConfig, say: Say = print,
                  bars: StageBars | None = None) -> dict[str, Any]:
    """The trained arms again at each of ``[eval] temperatures`` (``heldout.py``), after the primary campaign
    so that ``--until eval`` gives every seed its figures before any seed spends time on the extra ones."""
    extra = extra_temperatures(config.eval.temperature, config.eval.temperatures)
    if not extra:
        return {"skipped": "[eval] temperatures names no temperature but the primary one"}
    copies = StageCopies(Store(out / "adapters"))
    arms = arms_of(config, out, copies)
    found = {label(t): _campaign(config, out, device, executor, arms, t, bars) for t in extra}
    _say_removed(copies, "temperatures", say)
    return {"by_temperature": found}


def _campaign(config: ExperimentConfig, out: Path, device: str, executor: ExecutorConfig, arms: dict[str, str],
              temperature: float, bars: StageBars | None) -> dict[str, float]:
    """One held-out campaign at ``temperature`` (greedy: one run a task), its arms' entropy written beside it;
    returns each played arm's pass@1."""
    primary = config.eval.temperature
    folder, summary_file = campaign_paths(out, temperature, primary)
    greedy = temperature == 0
    plan, each = (bars or StageBars()).episodes(f"held-out episodes, {label(temperature)}")
    played = arms_at(arms, temperature, primary)
    run_evaluation(EvalConfig(
        arms=[f"{k}={v}" for k, v in played.items()], tasks=str(out / "tasks" / "test"),
        runs=1 if greedy else config.eval.runs, out=folder,
        episode=replace(_episode(config), temperature=temperature), ks=[1] if greedy else list(config.eval.k),
        seed=config.seed, executor=executor, json_out=summary_file, device=device,
        title=f"{config.name}: held-out evaluation, {label(temperature)}"), on_episode=each, on_plan=plan)
    summary = json.loads(summary_file.read_text())
    entropy = {arm: sampled_entropy(folder / "cache" / arm) for arm in played if arm != "oracle" and not greedy}
    write_json_atomic(folder / ENTROPY_FILE, {k: v for k, v in entropy.items() if v is not None})
    return {k: summary["arms"][k]["pass@1"]["mean"] for k in played}
