"""The divergence comparison as one call (``pdbgym divergence``): load and check the cache, settle the
transform, score every student (and the teacher, if asked), and build the report.

Formulas: docs/metrics.md. Nothing here prints or writes the report; ``render`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdbgym.divergence.distributed import compare_on_devices, launched_by_torchrun
from pdbgym.divergence.pipeline import DivergenceRun, Execution, run_divergence
from pdbgym.divergence.report import ReportConfig
from pdbgym.divergence.report import build_report as make_report
from pdbgym.divergence.scoring import ScoringConfig
from pdbgym.divergence.semantics import explicit_semantics, resolve_semantics
from pdbgym.errors import PdbgymError
from pdbgym.rollouts.cache import read_cache, resolve_cache_dir
from pdbgym.rollouts.record import LogprobSemantics, RolloutRecord
from pdbgym.rollouts.validate import validate_cache_report

if TYPE_CHECKING:
    from pdbgym.divergence.pipeline import Execution


@dataclass
class DivergenceConfig:
    """What to compare and how; ``pdbgym divergence`` reads its flag defaults from here.

    Args:
        students: student model folders or ``.gguf`` files (one report row each).
        cache: teacher-cache folder; None reads ``$KL_EVAL_TEACHER_CACHE_DIR``.
        teacher: None (cache only), a local teacher model, or an http(s) URL of a completions server.
        server_model: model name sent to a teacher server. Default ``"teacher"``.
        temperature, top_p, renormalized: the cached log-probs' transform, for a cache that does not
            declare one (all None: the cache must declare it). See ``semantics.explicit_semantics``.
        max_records: score only the first N records. Default None (all).
        device: ``cuda``, ``cuda:1``, ``cpu``; None picks cuda when available.
        student_samples: with a teacher, sample the students for KL(S||T) and JSD. Default True.
        max_new_tokens: length limit of student samples (tokens). Default 512.
        noise_floor: also score the teacher model against the cache. Default False.
        rescore_teacher: use the teacher model's log-probs instead of the cached ones. Default False.
        token_budget: padded tokens per forward batch. Default ``ScoringConfig.token_budget``.
        work_dir: resume folder for partial results. Default None (no resume).
        bootstrap: task-level bootstrap resamples. Default 2000.
        extreme_threshold: |log-ratio| in nats counted as extreme. Default 20.0.
        seed: seed of student sampling and of the bootstrap. Default 0.
        show_progress: progress bars on stderr. Default True.
        teacher_device_map: ``auto`` (or another ``modelload.DEVICE_MAPS`` name) spreads a local teacher too
            large for one GPU over every visible GPU; needs ``devices`` 1. Default None (one device).
        devices: data-parallel ranks (one GPU each, or CPU processes); records are sharded by token
            count and the report is the one-process report. Default 1. See ``divergence.distributed``.
    """

    students: list[str]
    cache: Path | None = None
    teacher: str | None = None
    server_model: str = "teacher"
    temperature: float | None = None
    top_p: float | None = None
    renormalized: bool | None = None
    max_records: int | None = None
    device: str | None = None
    student_samples: bool = True
    max_new_tokens: int = 512
    noise_floor: bool = False
    rescore_teacher: bool = False
    token_budget: int = ScoringConfig.token_budget
    work_dir: Path | None = None
    bootstrap: int = ReportConfig.n_resamples
    extreme_threshold: float = ReportConfig.extreme_threshold
    seed: int = 0
    show_progress: bool = True
    teacher_device_map: str | None = None
    devices: int = 1


@dataclass
class DivergenceOutcome:
    """The report (JSON-ready dict), the transform it was scored under, and the cache it read."""

    report: dict[str, Any]
    semantics: LogprobSemantics
    cache: Path


def load_records(cache: Path | None, max_records: int | None) -> tuple[Path, list[RolloutRecord]]:
    """The cache folder and its records (the first ``max_records``), after validating the whole cache."""
    folder = resolve_cache_dir(cache)
    report = validate_cache_report(folder)
    if not report.ok:
        listed = "\n  ".join(report.errors[:10])
        raise PdbgymError(f"the cache {folder} is not valid ({len(report.errors)} error(s)):\n  {listed}\n"
                          f"run `pdbgym cache validate {folder}` for the full list")
    records = read_cache(folder)
    if max_records is not None:
        if max_records < 1:
            raise PdbgymError(f"--max-records must be >= 1, got {max_records}")
        records = records[:max_records]
    if not records:
        raise PdbgymError(f"the cache {folder} holds no records")
    return folder, records


def compare(config: DivergenceConfig) -> DivergenceOutcome | None:
    """Score ``config.students`` against the cache (and teacher); the report with its context.

    The transform comes from the cache's declaration or, for a silent cache, from the explicit
    ``temperature``/``top_p``/``renormalized``; both present and different is a ``SemanticsError``.
    With ``devices`` > 1, or inside a torchrun world, the scoring is data-parallel and the outcome is
    rank 0's (None on torchrun's other ranks).
    """
    if config.devices < 1:
        raise PdbgymError(f"--devices must be >= 1, got {config.devices}")
    if config.devices > 1 or launched_by_torchrun():
        return compare_on_devices(config, compare_here)
    outcome = compare_here(config)
    assert outcome is not None
    return outcome


def compare_here(config: DivergenceConfig, execution: Execution | None = None,
                 build_report: bool = True) -> DivergenceOutcome | None:
    """``compare`` in this process; ``execution`` spreads its scoring (one rank's hooks), and
    ``build_report=False`` (ranks other than 0) scores without building the report (returns None)."""
    folder, records = load_records(config.cache, config.max_records)
    stated = explicit_semantics(config.temperature, config.top_p, config.renormalized)
    semantics = resolve_semantics(records, stated)
    run = DivergenceRun(
        records=records, semantics=semantics, students=list(config.students), teacher=config.teacher,
        server_model=config.server_model, student_samples=config.student_samples,
        max_new_tokens=config.max_new_tokens, noise_floor=config.noise_floor,
        rescore_teacher=config.rescore_teacher, device=config.device, work_dir=config.work_dir, seed=config.seed,
        teacher_device_map=config.teacher_device_map, scoring=ScoringConfig(token_budget=config.token_budget, show_progress=config.show_progress),
        execution=execution or Execution(),
    )
    scores = run_divergence(run)
    if not build_report:
        return None
    context = {"cache": str(folder), "n_records": len(records), "semantics": semantics.to_dict(),
               "teacher": config.teacher, "students": list(config.students)}
    report = make_report(scores, ReportConfig(extreme_threshold=config.extreme_threshold,
                                              n_resamples=config.bootstrap, seed=config.seed, context=context))
    return DivergenceOutcome(report, semantics, folder)
