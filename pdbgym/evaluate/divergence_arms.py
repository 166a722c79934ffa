"""KL to a teacher cache for each arm of an evaluation (``pdbgym eval --teacher-cache DIR``).

Every arm with a local model (a model folder or ``.gguf``, or ``embedded``: the de-quantized
SmolLM2 folder) is force-decoded on the cache's teacher samples through the divergence library's
KL-to-cache entry point (``divergence.tocache``: ``score_on_cache``, one arm at a time, the scoring of
``kl_to_cache``), and the arms' scores go through one report (``tocache.kl_report``): the named
estimators (``kl_teacher_student/<k1|k2|k3>/<aggregation>``)
with task-level bootstrap CIs, the compatibility keys ``kl_fwd_mean``, ``kl_back_mean``, ``jsd_mean``
(docs/metrics.md), and paired differences between arms (both arms resampled with the same tasks).

No student samples are drawn (the cache's teacher model is not loaded), so ``kl_back_mean`` and
``jsd_mean`` are null, as the divergence report documents. An arm is "n/a" with the reason when it has
no local model (``scripted``, a server URL), when its tool calls are grammar-constrained
(``constrained:MODEL``: not the model's own distribution), or when the divergence library refuses it (a tokenizer
whose fingerprint differs from the cache's, a vocabulary too small, a folder that does not load).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pdbgym.divergence.report import ReportConfig
from pdbgym.divergence.tocache import (
    TeacherCache,
    VocabMismatchError,
    kl_report,
    open_teacher_cache,
    score_on_cache,
)
from pdbgym.errors import PdbgymError
from pdbgym.fileio import write_json_atomic
from pdbgym.modelload import ModelLoadError, model_path
from pdbgym.policyname import policy_kind, split_constrained

SCRIPTED_REASON = ("the scripted oracle replays the task's reference fix: it samples no tokens, so it has "
                   "no distribution to compare with the teacher's")
CONSTRAINED_REASON = ("a constrained arm samples from its model's logits masked by a tool-call grammar; the "
                      "model's own log-probs on the cache are not that policy's, and the masked ones are -inf "
                      "wherever the teacher left the grammar")
SERVER_REASON = ("a model behind a server: KL needs the arm's log-probs of the cache's own token ids, "
                 "computed locally; give its weights as a folder (or use `pdbgym divergence --student PATH`)")


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
    """

    cache: Path
    max_records: int | None = None
    bootstrap: int = ReportConfig.n_resamples
    device: str | None = None
    seed: int = 0
    work_dir: Path | None = None
    show_progress: bool = False
    task_ids: list[str] | None = None


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
    model reference (``pdbgym.modelrefs``: adapter-store names) is materialized to its merged folder.
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


def _unavailable(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason,
            "compat": {"kl_fwd_mean": None, "kl_back_mean": None, "jsd_mean": None}}


def arm_divergence(arms: Mapping[str, str], config: ArmDivergenceConfig) -> dict[str, Any]:
    """Divergence of each arm (name -> model spec) against ``config.cache``, JSON-ready.

    Returns ``{"cache", "n_records", "n_tasks", "semantics", "settings", "arms": {arm: entry},
    "comparisons": [...]}``: an entry is ``{"available": True, "metrics", "compat", "teacher_samples",
    "per_task"}`` (the divergence report's student entry) or ``{"available": False, "reason", "compat"}``
    (compat values null);
    comparisons are the report's ``paired_differences`` between available arms. A cache that is invalid,
    empty or silent about its transform raises (``PdbgymError``) before any model loads.
    """
    target = open_for_tasks(config.cache, config.max_records, config.task_ids)  # refused before any model loads
    folder, records, semantics = target.folder, target.records, target.semantics
    entries: dict[str, dict[str, Any]] = {}
    scores = []
    for arm, model in arms.items():
        try:
            path, reason = local_model_of(model)
        except PdbgymError as exc:  # a reference whose lineage is broken: that arm only
            path, reason = None, str(exc)
        if path is None:
            entries[arm] = _unavailable(reason)
            continue
        try:
            scores.append(score_on_cache(path, target, arm, device=config.device, work_dir=config.work_dir,
                                         seed=config.seed, show_progress=config.show_progress))
        except (VocabMismatchError, ModelLoadError) as exc:
            entries[arm] = _unavailable(str(exc))
    report = kl_report(scores, target, config.bootstrap, config.seed)
    for student in report["students"]:
        entries[student["name"]] = {"available": True, **{k: v for k, v in student.items() if k != "name"}}
    return {
        "cache": str(folder),
        "n_records": len(records),
        "n_tasks": len({r.instance_id for r in records}),
        "semantics": semantics.to_dict(),
        "settings": report["settings"],
        "arms": {arm: entries[arm] for arm in arms},
        "comparisons": report["paired_differences"],
    }


DIVERGENCE_FILE = "divergence.json"


def campaign_divergence(arms: Mapping[str, str], cache: Path, out_dir: Path,
                        task_ids: list[str] | None = None) -> dict[str, Any]:
    """``arm_divergence`` for a campaign folder, on the records of its tasks (``task_ids``): each arm's scored
    arrays are kept in ``OUT/divergence-work`` as soon as they exist (a rerun scores only the arms left), and
    the result is kept as ``OUT/divergence.json`` so ``pdbgym eval report OUT`` shows it again."""
    result = arm_divergence(arms, ArmDivergenceConfig(cache, work_dir=Path(out_dir) / "divergence-work",
                                                      show_progress=True, task_ids=task_ids))
    write_json_atomic(Path(out_dir) / DIVERGENCE_FILE, result)
    return result


def stored_divergence(out_dir: Path) -> dict[str, Any] | None:
    """The divergence a campaign folder keeps (``campaign_divergence``), or None."""
    path = Path(out_dir) / DIVERGENCE_FILE
    return json.loads(path.read_text()) if path.is_file() else None
