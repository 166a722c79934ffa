"""The seed recipe (the SFT and evaluation settings that survived in the system pdbgym reproduces) and an
experiment file's departures from it, each with the reason the file gives in its ``[departures]`` table.

Every figure an experiment reports is measured under its own settings; where those are not the seed
recipe's, the report's header lists them beside the recipe's (``departure_rows``), read from the loaded
settings, so the list cannot drift from what ran. ``experiments/smollm2-seed-recipe.toml`` is the recipe
as an experiment file, for hardware that can run it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from pdbgym.episode_defaults import EpisodeSettings


class _SFT(Protocol):
    use_dora: bool
    rank: int
    epochs: float
    candidates: list[int]
    steps: int
    lr: float
    effective_batch: int


class _GRPO(Protocol):
    steps: int
    curriculum: str


class _Eval(Protocol):
    runs: int
    k: list[int]
    temperature: float


class RecipeSettings(Protocol):
    """What the seed recipe's rows read of an experiment: ``config.ExperimentConfig``, which cannot be named
    here (``config.py`` checks a file's ``[departures]`` against this module)."""

    @property
    def seed(self) -> int: ...

    @property
    def sft(self) -> _SFT: ...

    @property
    def grpo(self) -> _GRPO: ...

    @property
    def eval(self) -> _Eval: ...

    @property
    def episodes(self) -> EpisodeSettings: ...


# setting key (as a [departures] key) -> (what it is, the seed recipe's value, this experiment's value)
SEED_RECIPE: dict[str, tuple[str, str, Callable[[RecipeSettings], str]]] = {
    "seed": ("SFT seed", "42", lambda c: str(c.seed)),
    "sft.adapter": ("SFT adapter", "DoRA r24", lambda c: f"{'DoRA' if c.sft.use_dora else 'LoRA'} r{c.sft.rank}"),
    "sft.length": ("SFT length", "4 epochs", lambda c: f"{c.sft.epochs:g} epochs" if c.sft.epochs else
                   f"step counts {c.sft.candidates}, the best on val" if c.sft.candidates else f"{c.sft.steps} steps"),
    "sft.lr": ("SFT learning rate", "0.0001", lambda c: f"{c.sft.lr:g}"),
    "sft.effective_batch": ("SFT effective batch", "8", lambda c: str(c.sft.effective_batch)),
    "context": ("context (tokens)", "16384", lambda c: str(c.episodes.max_context_tokens)),
    "eval.runs": ("held-out runs a task", "8", lambda c: str(c.eval.runs)),
    "eval.k": ("held-out pass@k", "pass@1, pass@3", lambda c: ", ".join(f"pass@{k}" for k in c.eval.k)),
    "eval.temperature": ("held-out temperature", "0.7", lambda c: f"{c.eval.temperature:g}"),
    "grpo.curriculum": ("GRPO turn budget", "curriculum", lambda c: "curriculum" if c.grpo.curriculum != "fixed"
                        else f"fixed at {c.episodes.turn_budget}"),
}


def departure_rows(config: RecipeSettings, reasons: Mapping[str, str]) -> list[list[str]]:
    """[what, the recipe's value, this experiment's, the file's reason] for each setting that departs."""
    rows = []
    for key, (what, recipe, ours) in SEED_RECIPE.items():
        if key.startswith("grpo.") and not config.grpo.steps:
            continue  # no GRPO stage ([grpo] steps = 0): its settings shape nothing
        value = ours(config)
        if value != recipe:
            rows.append([what, recipe, value, reasons.get(key) or f"no reason given (add {key} to [departures])"])
    return rows


def unknown_departures(reasons: Mapping[str, object]) -> list[str]:
    """``[departures]`` keys that name no setting of the recipe (a typo would hide a reason)."""
    return sorted(set(reasons) - set(SEED_RECIPE))
