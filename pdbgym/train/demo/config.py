"""The demo as an experiment: ``demo.toml`` (package data) with the demo's flags laid over its tables.

The demo has no stages, report or figures of its own: ``run_demo`` loads the file with the tables its flags
give laid over it (``demo_experiment``) and hands it to ``train.experiment.run.run_experiment``, so a demo
folder is an experiment folder (``experiment.json``, ``report.md``), resumed or refused by the same rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pdbgym.errors import PdbgymError
from pdbgym.progress import TaskSet
from pdbgym.train.experiment.config import ExperimentConfig, Overrides, load_experiment

PRESET = Path(__file__).with_name("demo.toml")
LEGACY_STATE = "demo.json"  # what a demo folder held before the demo was an experiment file


@dataclass
class DemoConfig:
    """What ``pdbgym demo`` runs.

    Args:
        out: demo folder (an experiment folder): a rerun resumes the stages left. Default ``runs/demo``.
        teacher: ``scripted`` only: the experiment's oracle stage replays each task's reference fix. A model
            teacher's cache goes through ``pdbgym cache build`` and ``pdbgym train corpus``/``sft`` instead.
        constrained: removed (the experiment's arms are base, SFT and oracle); refused when set.
        workers: scripted episodes at once (worker processes). Default 2.
        overrides: table -> key -> value laid over ``demo.toml`` and checked as its own values are; the
            command's ``--sft-steps``, ``--turn-budget``, ... give them (``commands.OVERRIDES``).
        base: the student in place of the file's ``base`` (None: the file's, the embedded SmolLM2-135M); for
            library callers and tests, no flag.
    """

    out: Path = Path("runs/demo")
    teacher: str = "scripted"
    constrained: bool = False
    workers: int = 2
    overrides: Overrides = field(default_factory=dict)
    base: str | None = None

    def __post_init__(self) -> None:
        if self.teacher != "scripted":
            raise PdbgymError(f"--teacher {self.teacher!r}: the demo's teacher is the scripted oracle; for a model "
                              "teacher run pdbgym cache build, then pdbgym train corpus and train sft")
        if self.constrained:
            raise PdbgymError("--constrained was removed: the demo plays base, SFT and the oracle; play the "
                              "grammar-constrained base with pdbgym eval --arm guided=constrained:embedded")


def demo_experiment(config: DemoConfig) -> ExperimentConfig:
    """``demo.toml`` with ``config.overrides`` laid over its tables."""
    experiment = load_experiment(PRESET, over=config.overrides)
    experiment = replace(experiment, base=config.base) if config.base else experiment
    if experiment.eval.temperature == 0 and experiment.eval.runs > 1:
        raise PdbgymError(f"--eval-runs {experiment.eval.runs}: greedy held-out episodes (temperature 0) play one run "
                          "a task; give --temperature above 0 to sample several")
    return experiment


def run_demo(config: DemoConfig, say: Callable[[str], None] = print, progress: TaskSet | None = None) -> Path:
    """Every stage of the demo not yet finished in ``config.out``; returns the report's path (``report.md``).
    ``progress``: a ``pdbgym.progress`` task set for the long stages' bars."""
    # heavy: the stages' trainers, loaded when the demo runs
    from pdbgym.train.experiment.run import STATE_FILE, run_experiment

    out = Path(config.out)
    if (out / LEGACY_STATE).is_file() and not (out / STATE_FILE).is_file():
        raise PdbgymError(f"{out} holds a demo run from before the demo was an experiment file ({LEGACY_STATE}); "
                          "remove that folder or give another --out")
    experiment = demo_experiment(config)
    say(f"[demo] the experiment file {PRESET}" + (f", with {config.overrides}" if config.overrides else ""))
    return run_experiment(experiment, out, workers=config.workers, say=say, progress=progress)
