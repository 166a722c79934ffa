"""The divergence comparison as one call (``pdbgym divergence``): load and check the cache, settle the
transform, score every student (and the teacher, if asked), and build the report.

Formulas: docs/metrics.md. Nothing here prints or writes the report; ``render`` does.
"""

from __future__ import annotations

from pathlib import Path

from pdbgym.divergence.config import DivergenceConfig, DivergenceOutcome
from pdbgym.divergence.distributed import compare_on_devices, launched_by_torchrun
from pdbgym.divergence.pipeline import DivergenceRun, Execution, run_divergence
from pdbgym.divergence.report import ReportConfig, ReportContext
from pdbgym.divergence.report import build_report as make_report
from pdbgym.divergence.scoring import ScoringConfig
from pdbgym.divergence.semantics import explicit_semantics, resolve_semantics
from pdbgym.errors import PdbgymError
from pdbgym.rollouts.cache import read_cache, resolve_cache_dir
from pdbgym.rollouts.record import RolloutRecord
from pdbgym.rollouts.validate import validate_cache_report


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
    context: ReportContext = {"cache": str(folder), "n_records": len(records), "semantics": semantics.to_dict(),
               "teacher": config.teacher, "students": list(config.students)}
    report = make_report(scores, ReportConfig(extreme_threshold=config.extreme_threshold,
                                              n_resamples=config.bootstrap, seed=config.seed, context=context))
    return DivergenceOutcome(report, semantics, folder)
