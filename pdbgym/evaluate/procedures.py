"""The procedures behind ``pdbgym eval``: a campaign ending in a report, and checkpoint selection.

Each takes one config dataclass (whose defaults the command's flags read) and returns what the
command prints; nothing here prints.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pdbgym.agent.executor import ExecutorConfig
from pdbgym.defaults import documented
from pdbgym.episode_defaults import EpisodeSettings, SettingsError, check_setting, episode_defaults_for
from pdbgym.errors import PdbgymError
from pdbgym.evaluate.analysis import CampaignSummary, pass_at, summarize
from pdbgym.evaluate.campaign import Arm, CampaignConfig, run_campaign
from pdbgym.evaluate.divergence_arms import (
    cache_teacher,
    campaign_divergence,
    open_for_tasks,
    stored_divergence,
)
from pdbgym.evaluate.report import write_report
from pdbgym.evaluate.results import EpisodeRow, ResultsStore
from pdbgym.evaluate.selection import SelectionWarning, check_reportable, record_selection
from pdbgym.evaluate.splitsel import tasks_for_split
from pdbgym.interrupts import Interrupted
from pdbgym.rollouts.cache import CACHE_DIR_ENV

OnEpisode = Callable[[EpisodeRow], None]
OnPlan = Callable[[int, int], None]  # (episodes already done, episodes to play), once per campaign


@dataclass
class EvalConfig:
    """An evaluation campaign (``pdbgym eval``; ``demo`` and ``eval select`` build one too).

    Every field but ``title`` is a flag of ``pdbgym eval`` (``pdbgym.commandapp.config_command``), with the help
    declared on it; ``episode``'s and ``executor``'s fields are flags by their own names (no ``--top-p``).

    Args:
        arms: ``NAME=MODEL`` texts; MODEL is ``scripted``, ``embedded``, a model folder or a server URL.
        tasks: a suite (``builtin``, ``regression``) or a folder of tasks. Default ``"builtin"``.
        runs: episodes per task per arm. Default 2.
        split: evaluate only this split of ``splits`` (a split file). Default None (all tasks).
        out: campaign folder; a rerun with the same settings resumes it. Default ``runs/eval``.
        episode: context, turn budget, temperature (model arms), top-p and tokens a turn of every episode.
            Default ``EPISODE`` (32,768 tokens, 30 tool calls, T 0.7, top-p 1, 512 tokens a turn), as ``run``.
        executor: where episodes run (workers, Ray address). Default: local, one worker per core.
        force: report even on a task set that selected one of the arms (the report carries a warning).
        json_out: also write the machine summary here. Default None.
        ks: pass@k values that must be reportable (each k <= runs). Default none.
        title: the report's title; None makes one from ``tasks`` and ``split``.
        teacher_cache: a teacher cache; each arm with a local model gets its KL to it on the records of the
            campaign's tasks, scored after the episodes (the cache is checked before the first one; see
            ``evaluate.divergence_arms``). Default None: ``$KL_EVAL_TEACHER_CACHE_DIR`` when set, else none.
        teacher: the model that built ``teacher_cache`` (folder, ``.gguf``, ``embedded``, a store name): it
            scores each local arm's own samples (at most ``max_new_tokens`` each), filling ``kl_back_mean`` and
            ``jsd_mean``. Default None: ``embedded`` when the cache's records name it, else those stay null
            with the reason.
        seed: base seed; run ``r`` of task ``t`` samples with ``pdbgym.seeds.episode_seed(seed, t, r)``, the
            same for every arm. Default 0.
        device: where local-model arms run (``cpu``, ``cuda``). Default ``"cpu"``.
    """

    arms: list[str] = documented(help="NAME=MODEL; MODEL: scripted, embedded, a folder, an adapter-store name, a URL",
                                 factory=list, flag="--arm")
    tasks: str = documented("builtin", "A suite (builtin, regression) or a folder of tasks")
    runs: int = documented(2, "Runs per task per arm")
    split: str | None = documented(None, "Only tasks of this split (needs --splits)")
    splits: Path | None = documented(None, "Split file (pdbgym tasks split)")
    out: Path = documented(Path("runs/eval"), "Campaign folder (resumable)")
    episode: EpisodeSettings = documented(episode_defaults_for("eval"), "the settings of every episode",
                                          inner={"temperature": "Sampling temperature of model arms", "top_p": None})
    executor: ExecutorConfig = documented(help="where the episodes run", factory=ExecutorConfig)
    force: bool = documented(False, "Report even on a split that selected a checkpoint")
    json_out: Path | None = documented(None, "Write a machine summary here", flag="--json")
    ks: list[int] = documented(help="pass@k values that must be reportable (k <= runs)", factory=list, flag="--k")
    title: str | None = documented(None, "the report's title", cli=False)
    teacher_cache: Path | None = documented(None, "Teacher cache: KL of each local-model arm to it, on these tasks, "
                                                  "after the episodes (default: $KL_EVAL_TEACHER_CACHE_DIR)")
    teacher: str | None = documented(None, "Model that built the teacher cache: scores each arm's own samples for "
                                           "kl_back_mean and jsd_mean (default: embedded if the cache names it)")
    seed: int = documented(0, "Base seed; each (task, run) gets its own, the same for every arm")
    device: str = documented("cpu", "Device of local-model arms (cpu, cuda)")

    def __post_init__(self) -> None:
        if not self.arms:
            raise SettingsError("give at least one --arm NAME=MODEL")
        check_setting("runs", self.runs)


@dataclass
class EvalOutcome:
    """A finished campaign: its HTML report, the summary behind it, and selection warnings (if forced)."""

    page: Path
    summary: CampaignSummary
    warnings: list[SelectionWarning]


def teacher_cache_of(config: EvalConfig) -> Path | None:
    """``config.teacher_cache``, else the cache ``$KL_EVAL_TEACHER_CACHE_DIR`` names (as every cache command
    reads it), else None."""
    if config.teacher_cache is not None:
        return config.teacher_cache
    named = os.environ.get(CACHE_DIR_ENV, "").strip()
    return Path(named) if named else None


def run_evaluation(config: EvalConfig, on_episode: OnEpisode | None = None,
                   on_plan: OnPlan | None = None) -> EvalOutcome:
    """Check the request, play every missing episode, summarize, write the report.

    Refuses (``PdbgymError``) before any episode: pass@k with k above ``runs``, repeated arm names, a
    bad arm, a bad split, and reporting an arm on the task set that selected it (unless ``force``).
    """
    too_big = [k for k in config.ks if k > config.runs or k < 1]
    if too_big:
        raise PdbgymError(f"pass@{too_big[0]} needs at least {too_big[0]} runs per task; "
                          f"raise --runs to {max(too_big)} or drop --k {too_big[0]}")
    arms = [Arm.parse(text) for text in config.arms]
    if len({a.name for a in arms}) != len(arms):
        raise PdbgymError("arm names must be unique")
    tasks = tasks_for_split(config.tasks, config.split, config.splits)
    warnings = check_reportable([a.model for a in arms], [t.instance_id for t in tasks], force=config.force)
    campaign = CampaignConfig(tasks=config.tasks, arms=arms, runs=config.runs, split=config.split,
                              splits_file=str(config.splits) if config.splits else None,
                              episode=config.episode, seed=config.seed, device=config.device)
    task_ids = [t.instance_id for t in tasks]
    teacher_cache = teacher_cache_of(config)
    if config.teacher is not None and teacher_cache is None:
        raise PdbgymError(f"--teacher {config.teacher} scores the arms' samples against a teacher cache; give "
                          f"--teacher-cache DIR (or set ${CACHE_DIR_ENV}), or drop --teacher")
    if teacher_cache is not None:  # a bad cache or teacher fails before the first episode
        try:
            cache_teacher(open_for_tasks(teacher_cache, task_ids=task_ids), config.teacher)
        except PdbgymError as exc:
            if config.teacher_cache is None:
                raise PdbgymError(f"{exc} (the cache is ${CACHE_DIR_ENV}'s: unset it to evaluate without KL)") from exc
            raise
    rows = run_campaign(campaign, tasks, config.out, executor=config.executor, on_episode=on_episode,
                        on_plan=on_plan)
    divergence = None
    if teacher_cache is not None:  # after the episodes: the KL of one model of many must not hold them up
        try:
            divergence = campaign_divergence({a.name: a.model for a in arms}, teacher_cache, config.out, task_ids,
                                             config.teacher, config.episode.max_new_tokens, config.seed)
        except KeyboardInterrupt:
            raise Interrupted(
                f"interrupted while scoring KL to {teacher_cache}: all {len(rows)} episodes are saved in "
                f"{config.out}, and the arms already scored in {config.out / 'divergence-work'}; rerun the same "
                "command to finish the scoring (no episode is played again)") from None
    summary = summarize(rows, {a.name: a.model for a in arms}, [t.instance_id for t in tasks], config.runs)
    summary["divergence"] = divergence
    summary["selection_warnings"] = [w.text() for w in warnings]
    summary["expected_selection_inflation"] = {w.model: w.expected_inflation for w in warnings}
    title = config.title or f"pdbgym evaluation: {config.tasks}" + (f" ({config.split})" if config.split else "")
    return EvalOutcome(write_report(summary, rows, config.out, title, config.json_out), summary, warnings)


def rebuild_report(out: Path, json_out: Path | None = None) -> Path:
    """The report of a campaign folder rebuilt from its episodes (e.g. of one still running)."""
    store = ResultsStore(out)
    config = store.config()
    rows = store.rows()
    summary = summarize(rows, config["arms"], config["task_ids"], config["runs"])
    summary["divergence"] = stored_divergence(out)
    return write_report(summary, rows, out, f"pdbgym evaluation: {config['tasks']}", json_out)


@dataclass
class SelectConfig:
    """Checkpoint selection (``pdbgym eval select``).

    Args:
        checkpoints: ``NAME=MODEL`` texts, one per candidate.
        splits: the split file (``pdbgym tasks split``).
        tasks: the suite or folder holding the split's tasks. Default ``"builtin"``.
        select_on: the split used to choose. Default ``"val"``.
        report_on: the held-out split the chosen checkpoint is measured on, once. Default ``"test"``.
        runs: episodes per task per candidate. Default 2.
        out: folder for both campaigns (``select-<split>``, ``report-<split>``). Default ``runs/select``.
        force: allow ``report_on`` equal to ``select_on`` (a biased number). Default False.
        episode, executor: as in ``EvalConfig``, for both campaigns.

    Every field is a flag of ``pdbgym eval select`` (``pdbgym.commandapp.config_command``), with the help
    declared on it; ``episode``'s and ``executor``'s fields are flags by their own names (no ``--top-p``, no
    ``--local-episodes``).
    """

    checkpoints: list[str] = documented(help="NAME=MODEL, repeat for each candidate", flag="--checkpoint")
    splits: Path = documented(help="Split file")
    tasks: str = documented("builtin", "Suite or folder holding the split's tasks")
    select_on: str = documented("val", "Split used to choose")
    report_on: str = documented("test", "Split the chosen checkpoint is measured on, once")
    runs: int = documented(2, "Runs per task")
    out: Path = documented(Path("runs/select"), "Folder for both campaigns")
    force: bool = documented(False, "Allow --report-on equal to --select-on (biased!)")
    episode: EpisodeSettings = documented(episode_defaults_for("eval select"), "the settings of every episode",
                                          inner={"temperature": "Sampling temperature of model arms", "top_p": None})
    executor: ExecutorConfig = documented(help="where the episodes run", factory=ExecutorConfig,
                                          inner={"local_episodes": None, "local_processes": None})  # as before

    def __post_init__(self) -> None:
        if not self.checkpoints:
            raise SettingsError("give at least one --checkpoint NAME=MODEL")
        check_setting("runs", self.runs)


@dataclass
class SelectionOutcome:
    """The chosen candidate, its pass@1 on the selection split (0..1), the held-out report page, and the
    candidates tied with it (the first given of equal scores is chosen; a tie is said, never hidden)."""

    chosen: Arm
    score: float
    page: Path
    tied_with: list[str] = field(default_factory=list)  # candidates that scored as high: the choice is the first given


def select_checkpoint(config: SelectConfig, on_episode: OnEpisode | None = None,
                      on_plan: OnPlan | None = None) -> SelectionOutcome:
    """Choose a checkpoint on one split, record the choice, then measure the chosen one once on another.

    1. Refuse ``report_on == select_on`` unless forced, and a bad report split, before any episode.
    2. Run every candidate on ``select_on`` (forced: selection sets are where choices are made).
    3. Choose the highest pass@1 and write it to the selection ledger, with the mean standard error
       of the candidates' pass@1, so later reports on this task set carry the winner's-curse warning.
    4. Run the chosen checkpoint alone on ``report_on``; that campaign's report is the number to quote.
    """
    if config.select_on == config.report_on and not config.force:
        raise PdbgymError(f"--report-on {config.report_on} is the selection split; choose a held-out split "
                          "(or --force to accept a biased number)")
    arms = [Arm.parse(c) for c in config.checkpoints]
    tasks_for_split(config.tasks, config.report_on, config.splits)  # an empty or unknown split fails first
    common = dict(tasks=config.tasks, runs=config.runs, splits=config.splits, episode=config.episode,
                  executor=config.executor)
    chosen_on = run_evaluation(EvalConfig(arms=config.checkpoints, split=config.select_on, force=True,
                                          out=config.out / f"select-{config.select_on}",
                                          title=f"checkpoint selection on {config.select_on}", **common),
                               on_episode, on_plan)
    results = chosen_on.summary["arm_results"]
    scores = {a.model: pass_at(results[a.name], "pass@1")["mean"] for a in arms}
    ses = [pass_at(results[a.name], "pass@1")["se"] for a in arms]
    val_tasks = [t.instance_id for t in tasks_for_split(config.tasks, config.select_on, config.splits)]
    selection = record_selection(config.select_on, val_tasks, scores, float(sum(ses) / len(ses)))
    chosen = next(a for a in arms if a.model == selection.chosen)
    report = run_evaluation(EvalConfig(arms=[f"{chosen.name}={chosen.model}"], split=config.report_on,
                                       force=config.force, out=config.out / f"report-{config.report_on}",
                                       title=f"selected checkpoint {chosen.name} on {config.report_on}", **common),
                            on_episode, on_plan)
    tied = [a.name for a in arms if a is not chosen and scores[a.model] == scores[chosen.model]]
    return SelectionOutcome(chosen, scores[chosen.model], report.page, tied)
