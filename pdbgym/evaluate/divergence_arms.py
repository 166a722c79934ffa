"""KL to a teacher cache for each arm of an evaluation (``pdbgym eval --teacher-cache DIR``).

Every arm with a local model (a model folder or ``.gguf``, or ``embedded``: the de-quantized
SmolLM2 folder) is force-decoded on the cache's teacher samples through the divergence library's
KL-to-cache entry point (``divergence.tocache``: ``score_on_cache``, one arm at a time, the scoring of
``kl_to_cache``), and the arms' scores go through one report (``tocache.kl_report``): the named
estimators (``kl_teacher_student/<k1|k2|k3>/<aggregation>``)
with task-level bootstrap CIs, the compatibility keys ``kl_fwd_mean``, ``kl_back_mean``, ``jsd_mean``
(docs/metrics.md), and paired differences between arms (both arms resampled with the same tasks).

``kl_back_mean`` (KL(arm || teacher)) and ``jsd_mean`` need the arm's own samples scored by the teacher
model. When a teacher model loads here (``--teacher MODEL``, or ``embedded`` when every record of the cache
names that policy), each scored arm also continues the cache's prompts and the teacher scores its samples
(``tocache.score_with_samples``: what ``pdbgym divergence --teacher`` runs); otherwise they stay null and
the arm's entry says why (``student_samples_reason``: a scripted-oracle cache, a cache naming no loadable
teacher, a teacher the library refused). An arm is "n/a" with the reason when it has
no local model (``scripted``, a server URL), when its tool calls are grammar-constrained
(``constrained:MODEL``: not the model's own distribution), or when the divergence library refuses it (a tokenizer
whose fingerprint differs from the cache's, a vocabulary too small, a folder that does not load).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, TypedDict, cast

from pdbgym.divergence.report import (
    Compat,
    DifferenceEntry,
    MetricValue,
    ReportConfig,
    ReportSettings,
    ShareBlock,
    StudentScores,
)
from pdbgym.divergence.tocache import (
    TeacherCache,
    VocabMismatchError,
    kl_report,
    open_teacher_cache,
    score_on_cache,
    score_with_samples,
)
from pdbgym.episode_defaults import EPISODE
from pdbgym.errors import PdbgymError
from pdbgym.fileio import write_json_atomic
from pdbgym.modelload import EMBEDDED, ModelLoadError, checked_path, model_path
from pdbgym.policyname import is_server_url, policy_kind, split_constrained
from pdbgym.rollouts.record import SemanticsDict

SCRIPTED_REASON = ("the scripted oracle replays the task's reference fix: it samples no tokens, so it has "
                   "no distribution to compare with the teacher's")
CONSTRAINED_REASON = ("a constrained arm samples from its model's logits masked by a tool-call grammar; the "
                      "model's own log-probs on the cache are not that policy's, and the masked ones are -inf "
                      "wherever the teacher left the grammar")
SERVER_REASON = ("a model behind a server: KL needs the arm's log-probs of the cache's own token ids, "
                 "computed locally; give its weights as a folder (or use `pdbgym divergence --student PATH`)")
ORACLE_TEACHER_REASON = ("the cache's teacher is the scripted oracle: it is no model, so nothing scores the arm's "
                         "own samples (kl_back_mean and jsd_mean need a model teacher)")
UNNAMED_TEACHER_REASON = ("the cache's records name no teacher model that loads here (policy: {named}); give "
                          "--teacher MODEL, the model that built the cache, to score the arm's own samples")


@dataclass
class ArmDivergenceConfig:
    """Where the teacher cache is and how to score against it.

    Args:
        cache: teacher-cache folder (``pdbgym cache build``); its ``logprob_semantics`` must be declared.
        max_records: score only the first N records. Default None (all).
        bootstrap: task-level bootstrap resamples. Default ``ReportConfig.n_resamples`` (2000).
        device: ``cpu``, ``cuda``...; None picks cuda when available.
        seed: bootstrap seed. Default 0.
        work_dir: resume folder for scored arrays (a rerun loads no model twice). Default None.
        show_progress: progress bars on stderr. Default False.
        task_ids: score only the records of these tasks (a campaign's selected tasks). Default None (all).
        teacher: the local model that built the cache (folder, ``.gguf``, ``embedded``, a store name), to score
            each arm's own samples (``kl_back_mean``, ``jsd_mean``); None takes ``embedded`` when every record
            names that policy, else no arm samples. Default None.
        max_new_tokens: length cap of each arm sample (tokens). Default ``EPISODE.max_new_tokens`` (512).
    """

    cache: Path
    max_records: int | None = None
    bootstrap: int = ReportConfig.n_resamples
    device: str | None = None
    seed: int = 0
    work_dir: Path | None = None
    show_progress: bool = False
    task_ids: list[str] | None = None
    teacher: str | None = None
    max_new_tokens: int = EPISODE.max_new_tokens


def open_for_tasks(cache: Path, max_records: int | None = None, task_ids: list[str] | None = None) -> TeacherCache:
    """The validated cache, cut to the records of ``task_ids`` (None: all). Refuses (``PdbgymError``) a cache
    holding none of those tasks, so a campaign learns it before its first episode, not after the last."""
    target = open_teacher_cache(cache, max_records)
    if task_ids is None:
        return target
    wanted = set(task_ids)
    records = [r for r in target.records if r.instance_id in wanted]
    if not records:
        raise PdbgymError(f"the teacher cache {target.folder} holds no record of the {len(wanted)} task(s) this "
                          f"campaign plays (it holds {len({r.instance_id for r in target.records})} other tasks); "
                          "give the cache of these tasks, or leave --teacher-cache out")
    return replace(target, records=records)


def local_model_of(model: str) -> tuple[str | None, str]:
    """(path of the arm's local model, "") or (None, why the arm has none).

    A model folder or ``.gguf`` is itself; ``embedded`` is the de-quantized SmolLM2 folder; a registered
    model reference (an adapter-store name a registered lineage claims, ``pdbgym.modelload.model_path``) is materialized to its merged folder.
    """
    kind = policy_kind(model)
    if split_constrained(model)[1]:
        return None, CONSTRAINED_REASON
    if kind in ("scripted", "human"):
        return None, SCRIPTED_REASON
    if kind == "url":
        return None, SERVER_REASON

    # The one model loader's resolution: ``embedded`` is its folder, an adapter-store reference the folder of
    # its merged lineage, named by the artifact's id, so scores stored under divergence-work/ can never be
    # reused for another artifact given the same name.
    return str(model_path(model)), ""


def cache_teacher(target: TeacherCache, teacher: str | None) -> tuple[str | None, str]:
    """(path of the teacher model that scores the arms' samples, "") or (None, why there is none).

    ``teacher`` given is checked now (``PdbgymError``: a missing model, a server URL, a cache the scripted
    oracle wrote), so a wrong one fails before a campaign's first episode. None: ``embedded`` when every
    record of the cache names that policy (the cache builder writes each record's ``policy``); a folder
    policy is recorded by its base name only, which does not say where the model is.
    """
    if target.semantics.engine == "deterministic":
        if teacher is not None:
            raise PdbgymError(f"--teacher {teacher}: the cache {target.folder} was written by the scripted oracle, "
                              "not by a model, so no model's scores stand for its teacher; drop --teacher or give "
                              "the cache that model built")
        return None, ORACLE_TEACHER_REASON
    if teacher is None:
        named = sorted({str(r.metadata.get("policy")) for r in target.records if r.metadata.get("policy")})
        if named != [EMBEDDED]:
            return None, UNNAMED_TEACHER_REASON.format(named=", ".join(named) or "none recorded")
        teacher = EMBEDDED
    if is_server_url(teacher):
        raise PdbgymError(f"--teacher {teacher} is a server: scoring the arms' samples needs the teacher's weights "
                          "here (a folder, .gguf or 'embedded'); `pdbgym divergence --teacher URL` scores "
                          "against a server under the raw transform")
    return str(checked_path(teacher)), ""


class ScoredArm(TypedDict):
    """An arm scored on the cache: its entry of the divergence report (without the name), and why its own
    samples were not scored (None: they were)."""

    available: Literal[True]
    metrics: dict[str, MetricValue]
    compat: Compat
    teacher_samples: ShareBlock
    student_samples: ShareBlock | None
    per_task: dict[str, dict[str, float | None]]
    student_samples_reason: str | None


class UnscoredArm(TypedDict):
    """An arm that could not be scored, and why; its compat figures all None."""

    available: Literal[False]
    reason: str
    compat: Compat


class ArmDivergence(TypedDict):
    """``arm_divergence``: the cache, its records and tasks, its transform, the teacher that scored the arms'
    samples (None: none), the report's settings, each arm's entry and the paired differences."""

    cache: str
    n_records: int
    n_tasks: int
    semantics: SemanticsDict
    teacher: str | None
    settings: ReportSettings
    arms: dict[str, ScoredArm | UnscoredArm]
    comparisons: list[DifferenceEntry]


def _unavailable(reason: str) -> UnscoredArm:
    return {"available": False, "reason": reason,
            "compat": {"kl_fwd_mean": None, "kl_back_mean": None, "jsd_mean": None}}


@contextmanager
def _scores_folder(work_dir: Path | None, needed: bool) -> Iterator[Path | None]:
    """``work_dir``, or a scratch folder when none is given and the arms are scored twice (on the cache,
    then with their samples): the second run then reads the first's arrays instead of scoring again."""
    if work_dir is not None or not needed:
        yield work_dir
        return
    with tempfile.TemporaryDirectory(prefix="pdbgym-divergence-") as scratch:
        yield Path(scratch)


def arm_divergence(arms: Mapping[str, str], config: ArmDivergenceConfig) -> ArmDivergence:
    """Divergence of each arm (name -> model spec) against ``config.cache``, JSON-ready.

    Returns ``{"cache", "n_records", "n_tasks", "semantics", "teacher", "settings", "arms": {arm: entry},
    "comparisons": [...]}``: an entry is ``{"available": True, "metrics", "compat", "teacher_samples",
    "student_samples", "per_task", "student_samples_reason"}`` (the divergence report's student entry; the
    reason is null when the arm's samples were scored, else why ``kl_back_mean``/``jsd_mean`` are null) or
    ``{"available": False, "reason", "compat"}`` (compat values null); ``teacher`` is the model that scored
    the arms' samples (null: none); comparisons are the report's ``paired_differences`` between available
    arms. A cache that is invalid, empty or silent about its transform, or a bad ``config.teacher``, raises
    (``PdbgymError``) before any model loads.
    """
    target = open_for_tasks(config.cache, config.max_records, config.task_ids)  # refused before any model loads
    teacher, no_samples = cache_teacher(target, config.teacher)
    folder, records, semantics = target.folder, target.records, target.semantics
    entries: dict[str, ScoredArm | UnscoredArm] = {}
    scores: dict[str, StudentScores] = {}
    paths: dict[str, str] = {}
    with _scores_folder(config.work_dir, teacher is not None) as work_dir:
        for arm, model in arms.items():
            try:
                path, reason = local_model_of(model)
            except PdbgymError as exc:  # a reference whose lineage is broken: that arm only
                path, reason = None, str(exc)
            if path is None:
                entries[arm] = _unavailable(reason)
                continue
            try:
                scores[arm] = score_on_cache(path, target, arm, device=config.device, work_dir=work_dir,
                                             seed=config.seed, show_progress=config.show_progress)
                paths[arm] = path
            except (VocabMismatchError, ModelLoadError) as exc:
                entries[arm] = _unavailable(str(exc))
        if teacher is not None and scores:
            try:  # every arm that scored on the cache, then the teacher on their samples, loaded once
                sampled = score_with_samples([paths[a] for a in scores], target, teacher, list(scores),
                                             max_new_tokens=config.max_new_tokens, device=config.device,
                                             work_dir=work_dir, seed=config.seed, show_progress=config.show_progress)
                scores = {s.name: s for s in sampled}
            except (VocabMismatchError, ModelLoadError) as exc:
                no_samples = f"the arms' samples could not be scored by the teacher {teacher}: {exc}"
    report = kl_report(list(scores.values()), target, config.bootstrap, config.seed)
    for student in report["students"]:
        entries[student["name"]] = {"available": True, "metrics": student["metrics"], "compat": student["compat"],
                                    "teacher_samples": student["teacher_samples"],
                                    "student_samples": student["student_samples"], "per_task": student["per_task"],
                                    "student_samples_reason": no_samples or None}
    return {
        "cache": str(folder),
        "n_records": len(records),
        "n_tasks": len({r.instance_id for r in records}),
        "semantics": semantics.to_dict(),
        "teacher": teacher if not no_samples else None,
        "settings": report["settings"],
        "arms": {arm: entries[arm] for arm in arms},
        "comparisons": report["paired_differences"],
    }


DIVERGENCE_FILE = "divergence.json"


def campaign_divergence(arms: Mapping[str, str], cache: Path, out_dir: Path, task_ids: list[str] | None = None,
                        teacher: str | None = None, max_new_tokens: int = EPISODE.max_new_tokens,
                        seed: int = 0) -> ArmDivergence:
    """``arm_divergence`` for a campaign folder, on the records of its tasks (``task_ids``), the arms' samples
    capped at the campaign's ``max_new_tokens`` and drawn from its ``seed``: each arm's scored arrays and
    samples are kept in ``OUT/divergence-work`` as soon as they exist (a rerun scores only what is left), and
    the result is kept as ``OUT/divergence.json`` so ``pdbgym eval report OUT`` shows it again."""
    result = arm_divergence(arms, ArmDivergenceConfig(cache, work_dir=Path(out_dir) / "divergence-work",
                                                      show_progress=True, task_ids=task_ids, teacher=teacher,
                                                      max_new_tokens=max_new_tokens, seed=seed))
    write_json_atomic(Path(out_dir) / DIVERGENCE_FILE, result)
    return result


def stored_divergence(out_dir: Path) -> ArmDivergence | None:
    """The divergence a campaign folder keeps (``campaign_divergence``), or None."""
    path = Path(out_dir) / DIVERGENCE_FILE
    return cast(ArmDivergence, json.loads(path.read_text())) if path.is_file() else None  # written by us
