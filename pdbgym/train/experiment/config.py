"""An experiment's settings, read from a versioned TOML file (``experiments/*.toml`` in the repository).

Tables: ``[tasks]`` (``families``: family name -> count, ``suites``: suites or folders), ``[split]``
(``val``, ``test`` fractions; groups are source modules, stratified by rung; ``test_only``: families and
suites of ``[tasks]`` held out whole in the test split, the fractions dealt over the rest), ``[episodes]``
(``turn_budget``, ``max_new_tokens``, ``max_context_tokens`` of the shared ``EpisodeSettings``; its
temperature is ``[eval]``'s), ``[sft]`` (``steps``, or ``candidates``
chosen on val by ``target``), ``[grpo]``, ``[eval]``; top
level ``version`` (1), ``name``, ``base`` (``embedded`` or a model folder), ``seed``, ``seeds`` (several
training seeds, one folder each: ``seeds.py``) and ``task_seed`` (the tasks' and split's draw; default
``seed``). ``[quick]``
holds the same tables with tiny counts; ``--quick`` lays them over the rest. Unknown keys are refused
by name, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pdbgym.episode_defaults import EpisodeSettings, SettingsError, episode_defaults_for
from pdbgym.errors import PdbgymError
from pdbgym.fileio import JSONValue
from pdbgym.train.experiment.recipe import SEED_RECIPE, unknown_departures

VERSION = 1
SFT_CHOICE_FILE = "choice.json"  # OUT/sft/choice.json: each [sft] candidate's val pass@1 and the one chosen


class ExperimentError(PdbgymError):
    """An experiment file that cannot be run as written, or an output folder made with other settings."""


@dataclass(frozen=True)
class TaskSettings:
    families: dict[str, int] = field(default_factory=dict)
    suites: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SplitSettings:
    val: float = 0.15
    test: float = 0.25
    # Task sets of [tasks] (a family's name or a suite as written there) held out whole: every task of them in
    # the test split, none trained on or chosen with; the fractions are dealt over the other tasks.
    test_only: list[str] = field(default_factory=list)


# The [episodes] keys an experiment file sets (its episodes' temperature is [eval]'s); the rest of the
# shared EpisodeSettings keeps the experiment's defaults (pdbgym.episode_defaults, "experiment run").
EPISODE_KEYS = ("turn_budget", "max_new_tokens", "max_context_tokens")
EPISODES = episode_defaults_for("experiment run")


@dataclass(frozen=True)
class SFTSettings:
    steps: int = 60
    lr: float = 5e-4
    rank: int = 16
    max_tokens: int = 2048
    # SFT strength, chosen on val: one SFT run per step count in ``candidates`` (none: one run of ``steps``),
    # each played ``val_runs`` times a val task at the eval temperature. The best on val (ties: more steps)
    # is the ``sft-best`` arm; GRPO starts from it (``start = "best"``) or from the one whose val pass@1 is
    # nearest ``target`` (``start = "target"``, ties: more steps), then also played as the arm ``sft-start``.
    # A start that solves every task leaves GRPO no reward spread; one that solves none, no signal.
    candidates: list[int] = field(default_factory=list)
    target: float = 0.5
    val_runs: int = 3
    start: str = "best"
    use_dora: bool = False  # DoRA (the seed recipe's adapter) instead of LoRA
    effective_batch: int = 1  # examples per optimizer step
    epochs: float = 0.0  # passes over the corpus instead of steps (0: steps or candidates decide)
    # Share of the corpus's tasks held out from each SFT run for its val loss, by which the best checkpoint
    # is kept (0: none held out, every task trains and the last step is kept; no val-loss passes).
    val_fraction: float = 0.2


@dataclass(frozen=True)
class GRPOSettings:
    steps: int = 40  # 0: no GRPO stage (and no sft-matched control): the experiment ends at SFT against the base
    group: int = 8
    tasks_per_step: int = 2
    lr: float = 2e-5
    save_steps: int = 10
    val_runs: int = 2
    val_k: int = 2
    replay_fraction: float = 0.25
    anchor_weight: float = 0.1
    max_minutes: float = 0.0  # minutes of GRPO steps in all, across resumed invocations (0: no cap)
    tasks: int = 0  # train tasks GRPO plays, a seeded pick stratified by rung (0: all of the train split)
    # The turn budget: "fixed" at [episodes] turn_budget, or "schedule" from budget_start up to it over
    # budget_ramp_steps (the seed recipe's turn-budget curriculum; pdbgym train grpo --curriculum).
    curriculum: str = "fixed"
    budget_start: int = 0  # 0: [episodes] turn_budget
    budget_ramp_steps: int = 100
    # How the update runs, not what it computes (pdbgym train grpo --update-micro-batches,
    # --no-gradient-checkpointing, --cudnn-attention, --compile-decode, --no-fused-dora, --trace-step): left out
    # of the settings digest, so a folder resumes under either.
    update_micro_batches: int = 1
    gradient_checkpointing: bool = True
    cudnn_attention: bool = False
    compile_decode: bool = False
    fused_dora: bool = True
    trace_step: int = 0


UPDATE_ONLY = ("update_micro_batches", "gradient_checkpointing", "cudnn_attention", "compile_decode", "fused_dora",
               "trace_step")  # [grpo] keys the digest leaves out


@dataclass(frozen=True)
class EvalSettings:
    runs: int = 4
    k: list[int] = field(default_factory=lambda: [1])
    kl_tokens: int = 1024
    # The model arms sample as GRPO's rollouts do: the policy GRPO trains is the T = 1 sampler, and a
    # cooler draw measures another one (on the lowest rung the SFT model solves nearly every held-out
    # task at 0.7, so no gain can show there).
    temperature: float = EPISODES.temperature
    # More temperatures the model arms are played at, each its own campaign (``heldout.py``; 0: greedy, one
    # run a task): a gain at one sampler only is a claim about that sampler.
    temperatures: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class ExperimentConfig:
    name: str
    base: str = "embedded"
    seed: int = 0
    version: int = VERSION
    tasks: TaskSettings = field(default_factory=TaskSettings)
    split: SplitSettings = field(default_factory=SplitSettings)
    episodes: EpisodeSettings = EPISODES
    sft: SFTSettings = field(default_factory=SFTSettings)
    grpo: GRPOSettings = field(default_factory=GRPOSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    source: str = ""  # the file it was read from
    quick: bool = False
    # Why each setting departs from the seed recipe (recipe.SEED_RECIPE keys -> reason), shown in the report.
    departures: dict[str, str] = field(default_factory=dict)
    # Several training seeds (``seeds.py``): one folder each, the tasks and split drawn with ``task_seed``
    # (None: ``seed``) in every one, so the held-out tasks are the same and the seeds pair on them.
    seeds: list[int] = field(default_factory=list)
    task_seed: int | None = None

    def for_seed(self, seed: int) -> ExperimentConfig:
        """This experiment as one seed's run: ``seed`` trains, the tasks and split keep the file's draw."""
        return replace(self, seed=seed, seeds=[], task_seed=self.tasks_drawn_with())

    def tasks_drawn_with(self) -> int:
        """The seed the tasks are generated and split with."""
        return self.seed if self.task_seed is None else self.task_seed

    def to_dict(self) -> dict[str, JSONValue]:
        data = {k: v for k, v in asdict(self).items() if k != "source"}
        data["episodes"] = {k: data["episodes"][k] for k in EPISODE_KEYS}  # what the file sets, as digests hold
        return data

    def digest(self) -> str:
        data = self.to_dict()
        data["grpo"] = {k: v for k, v in data["grpo"].items() if k not in UPDATE_ONLY}  # type: ignore[union-attr]
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


if TYPE_CHECKING:  # annotations only
    from _typeshed import DataclassInstance

Table = TypeVar("Table", bound="DataclassInstance")  # one of TABLES' settings classes
# table -> key -> value laid over an experiment file's tables, as a command's flags give them (``pdbgym demo``)
Overrides = dict[str, dict[str, JSONValue]]

TABLES = {"tasks": TaskSettings, "split": SplitSettings, "episodes": EpisodeSettings, "sft": SFTSettings,
          "grpo": GRPOSettings, "eval": EvalSettings}
TOP = {"version", "name", "base", "seed", "seeds", "task_seed", "departures", "quick", *TABLES}


def _table(where: str, cls: type[Table], values: object, base: Table) -> Table:
    if not isinstance(values, dict):
        raise ExperimentError(f"{where}: expected a table, got {type(values).__name__}")
    known = set(EPISODE_KEYS) if cls is EpisodeSettings else {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ExperimentError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    if cls is SFTSettings and len({"steps", "candidates", "epochs"} & set(values)) > 1:
        raise ExperimentError(f"{where}: give one of steps (one SFT run), epochs (one run of that many passes) or "
                              "candidates (several step counts, the best chosen on val)")
    try:
        return replace(base, **values)
    except SettingsError as exc:  # a value outside its range ([episodes] turn_budget = 0)
        raise ExperimentError(f"{where}: {exc}") from exc


def load_experiment(path: Path, quick: bool = False, over: Overrides | None = None) -> ExperimentConfig:
    """The experiment in ``path``, with its ``[quick]`` tables laid over when ``quick``, then ``over`` (table ->
    key -> value, as a command's flags give them: ``pdbgym demo``), every value checked as the file's are."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ExperimentError(f"{path}: no such experiment file (see experiments/ in the repository)") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML ({exc})") from exc
    unknown = sorted(set(data) - TOP)
    if unknown:
        raise ExperimentError(f"{path}: unknown key(s) {unknown}; known: {sorted(TOP)}")
    if data.get("version", VERSION) != VERSION:
        raise ExperimentError(f"{path}: version {data.get('version')} (this pdbgym reads version {VERSION})")
    if "name" not in data:
        raise ExperimentError(f"{path}: give the experiment a name (name = \"...\")")
    config = ExperimentConfig(name=str(data["name"]), base=str(data.get("base", "embedded")),
                              seed=int(data.get("seed", 0)), source=str(path))
    seeds = data.get("seeds", [])
    if not isinstance(seeds, list) or any(not isinstance(n, int) or n < 0 for n in seeds) or len(set(seeds)) < len(seeds):
        raise ExperimentError(f"{path}: seeds = {seeds!r} must be a list of distinct integers >= 0")
    if "task_seed" in data and not isinstance(data["task_seed"], int):
        raise ExperimentError(f"{path}: task_seed = {data['task_seed']!r} must be an integer")
    config = replace(config, seeds=list(seeds), task_seed=data.get("task_seed"))
    departures = data.get("departures", {})
    if not isinstance(departures, dict) or unknown_departures(departures) or \
            any(not isinstance(v, str) for v in departures.values()):
        raise ExperimentError(f"{path}: [departures] must map settings of the seed recipe to reasons (text); unknown "
                              f"or not text: {unknown_departures(departures) if isinstance(departures, dict) else departures}; "
                              f"known: {sorted(SEED_RECIPE)}")
    config = replace(config, departures=dict(departures))
    layers = [(data, "[{}]"), (data.get("quick", {}) if quick else {}, "[quick.{}]"), (over or {}, "[{}] as given")]
    for layer, label in layers:
        for table, cls in TABLES.items():
            if table in layer:
                where = f"{path}: {label.format(table)}"
                config = replace(config, **{table: _table(where, cls, layer[table], getattr(config, table))})
    if quick and "quick" not in data:
        raise ExperimentError(f"{path}: --quick needs a [quick] table with the tiny counts")
    config = replace(config, quick=quick)
    if not config.tasks.families and not config.tasks.suites:
        raise ExperimentError(f"{path}: [tasks] names no family and no suite")
    named = [*config.tasks.families, *config.tasks.suites]
    if unknown_sets := [name for name in config.split.test_only if name not in named]:
        raise ExperimentError(f"{path}: [split] test_only = {unknown_sets!r} names no family or suite of [tasks] "
                              f"({', '.join(named)})")
    if not [name for name in named if name not in config.split.test_only]:
        raise ExperimentError(f"{path}: [split] test_only holds every task set of [tasks]; leave one to train on")
    bad_k = [k for k in config.eval.k if not 1 <= k <= config.eval.runs]
    if bad_k:
        raise ExperimentError(f"{path}: [eval] k = {bad_k} needs 1 <= k <= runs ({config.eval.runs})")
    if config.grpo.tasks and not config.grpo.tasks_per_step <= config.grpo.tasks:
        raise ExperimentError(f"{path}: [grpo] tasks = {config.grpo.tasks} must be 0 (the whole train split) or at "
                              f"least tasks_per_step ({config.grpo.tasks_per_step})")
    sft = config.sft
    counts = sft.candidates
    if not isinstance(counts, list) or any(not isinstance(n, int) or n < 1 for n in counts) \
            or len(set(counts)) < len(counts):
        raise ExperimentError(f"{path}: [sft] candidates = {sft.candidates!r} must be a list of distinct step counts "
                              ">= 1")
    if config.grpo.steps < 0:
        raise ExperimentError(f"{path}: [grpo] steps = {config.grpo.steps} must be >= 0 (0: no GRPO stage)")
    if not config.split.val and (config.sft.candidates or config.grpo.steps):
        raise ExperimentError(f"{path}: [split] val = 0 leaves no val tasks for the SFT choice among [sft] "
                              "candidates and GRPO's checkpoint gates; give val > 0, or [grpo] steps = 0 and one "
                              "[sft] steps")
    if config.grpo.curriculum not in ("fixed", "schedule"):
        raise ExperimentError(f"{path}: [grpo] curriculum = {config.grpo.curriculum!r}: give \"fixed\" or \"schedule\"")
    if not 0 <= config.grpo.budget_start <= config.episodes.turn_budget:
        raise ExperimentError(f"{path}: [grpo] budget_start = {config.grpo.budget_start} must lie in 0 (the turn budget) "
                              f"to [episodes] turn_budget ({config.episodes.turn_budget})")
    if not 0 <= sft.val_fraction < 1:
        raise ExperimentError(f"{path}: [sft] val_fraction = {sft.val_fraction} must lie in [0, 1)")
    if sft.start not in ("best", "target"):
        raise ExperimentError(f"{path}: [sft] start = {sft.start!r}: give \"best\" (GRPO from the best SFT model on "
                              "val) or \"target\" (from the one nearest [sft] target)")
    if sft.candidates and not (0 < sft.target < 1 and sft.val_runs >= 1):
        raise ExperimentError(f"{path}: [sft] target = {sft.target} must lie in (0, 1) and val_runs = {sft.val_runs} "
                              "be >= 1")
    if any(not isinstance(t, int | float) or t < 0 for t in config.eval.temperatures):
        raise ExperimentError(f"{path}: [eval] temperatures = {config.eval.temperatures!r} must be numbers >= 0 "
                              "(0: greedy)")
    if config.eval.temperature < 0:
        raise ExperimentError(f"{path}: [eval] temperature = {config.eval.temperature} must be >= 0 (0: greedy)")
    return config
