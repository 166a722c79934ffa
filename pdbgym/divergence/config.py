"""What a divergence comparison is asked (``DivergenceConfig``) and what it gives back (``DivergenceOutcome``).

Below both ``compare`` (the comparison in one process) and ``distributed`` (the same over data-parallel
ranks), so neither imports the other for these types.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pdbgym.divergence.report import DivergenceReport, ReportConfig
from pdbgym.divergence.scoring import ScoringConfig
from pdbgym.rollouts.record import LogprobSemantics


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

    report: DivergenceReport
    semantics: LogprobSemantics
    cache: Path
