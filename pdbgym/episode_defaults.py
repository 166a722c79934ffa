"""The one settings type of an agent episode, its checks, and every command's defaults for it.

``EpisodeSettings`` holds what every command that plays episodes decides alike (context, turn budget,
tokens a turn, temperature, top-p), and checks each value when it is made: a command builds its config
from its flags before any work, so a bad value is refused then, in one line (``SettingsError``, exit 2).
It is nested as ``episode`` in every config that plays episodes (``EvalConfig``, ``SelectConfig``,
``CampaignConfig``, ``CacheBuildConfig``, ``DaggerConfig``, ``DemoConfig``, the experiment's
``[episodes]``); ``EnvConfig`` and ``SamplingParams``, the environment's and the backend's halves of an
episode, check their values with the same rules (``check_setting``).

``EPISODE`` is the shared default. ``COMMAND_EPISODES`` is every command's default, the shared one or one
that keeps another value on purpose through a named constant below, each saying why; ``EXCEPTIONS`` lists
those values, and docs/defaults.md holds the same tables (``tests/test_cli_defaults.py`` holds them
together). The sampling seed of an episode is not a setting here: one rule (``pdbgym.seeds``) derives it
from a command's base seed, the task's id and the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace

from pdbgym.defaults import documented
from pdbgym.errors import PdbgymError


class SettingsError(PdbgymError):
    """A setting outside its range (a turn budget of 0, a negative temperature, ...), refused when it is made."""


def _whole_at_least_one(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _non_negative(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _nucleus(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1


# setting -> (the test its value must pass, what the value must be, in words)
RULES: dict[str, tuple[Callable[[object], bool], str]] = {
    "max_context_tokens": (_whole_at_least_one, "a whole number of tokens >= 1"),
    "turn_budget": (_whole_at_least_one, "a whole number of tool calls >= 1"),
    "max_new_tokens": (_whole_at_least_one, "a whole number >= 1"),
    "temperature": (_non_negative, ">= 0 (0 is greedy)"),
    "top_p": (_nucleus, "in (0, 1] (1 keeps the whole distribution)"),
    "runs": (_whole_at_least_one, "a whole number of episodes >= 1"),
}


def check_setting(name: str, value: object, rule: str | None = None) -> None:
    """Raise ``SettingsError`` naming ``name`` unless ``value`` passes the rule of ``rule`` (default: ``name``).

    ``rule`` lets a field of another name keep a setting's rule: ``eval_runs`` is checked as ``runs``.
    """
    test, must = RULES[rule or name]
    if not test(value):
        raise SettingsError(f"{name} must be {must}, got {value!r}")


@dataclass(frozen=True)
class EpisodeSettings:
    """The settings of one agent episode, each checked when the settings are made (``SettingsError``).

    Args:
        max_context_tokens: trajectory cap in tokens (prompt + every turn); reaching it ends the episode as
            ``ctx_overflow``. >= 1. Shared default 32,768, the native context of current tool-calling
            models: teacher caches were built at it while ``eval`` stopped at 8,192, so the same model's
            long episodes ran on in one and counted as ``ctx_overflow`` in the other.
        turn_budget: tool calls per episode before ``budget`` ends it (malformed calls count). >= 1.
            Shared default 30.
        temperature: sampling temperature of a model policy (0 = greedy). >= 0. Shared default 0.7.
        top_p: nucleus mass of a model policy (1.0: no truncation). In (0, 1]. Shared default 1.0.
        max_new_tokens: token cap of one model turn. >= 1. Shared default 512.
    """

    # Each field's help is its flag's in every command built from a config that nests these settings
    # (pdbgym.commandapp.config_command); a command's ``inner`` may say it more precisely there.
    max_context_tokens: int = documented(32_768, "Trajectory cap in tokens (then ctx_overflow)",
                                         old_flags=("--context-tokens",))
    turn_budget: int = documented(30, "Tool calls per episode before 'budget'", old_flags=("--budget",))
    temperature: float = documented(0.7, "Sampling temperature of a model policy (0: greedy)")
    top_p: float = documented(1.0, "Nucleus mass of a model policy (1: the whole distribution)")
    max_new_tokens: int = documented(512, "Token cap of one model turn")

    def __post_init__(self) -> None:
        for spec in fields(self):
            check_setting(spec.name, getattr(self, spec.name))


EPISODE = EpisodeSettings()

# GRPO holds G sequences of up to this length, with their logits (and the reference model's when beta != 0),
# in memory at every update, and TRL's max_completion_length follows it: memory grows with G x this.
GRPO_MAX_CONTEXT_TOKENS = 8_192
# GRPO samples the policy's own distribution: TRL recomputes the log-probs at this temperature and the
# group's advantages need the spread of T = 1 (TRL's default); a cooler draw explores less.
GRPO_TEMPERATURE = 1.0
# DAgger trains on (student state + the teacher's turn) examples, and SFT cuts an example's end beyond
# its max_length (SFTTrainConfig, 16,384): a longer state would lose the teacher's label itself.
DAGGER_MAX_CONTEXT_TOKENS = 16_384

# ``pdbgym cache build`` writes teacher caches, and the teacher recipe samples its rollouts at T = 0.7 (the shared
# value) with top-p 0.9: a cache built with default flags is one of that recipe. Its records say so
# (``logprob_semantics.top_p``), so the divergence library accounts for the nucleus.
TEACHER_TOP_P = 0.9

# ``pdbgym experiment run`` trains and measures a small model's SFT -> GRPO on synthesized task families whose
# oracle solves each task in a few calls: 10 tool calls leave room past the oracle's, 96 tokens hold a pdb
# call with its arguments, and 4,096 tokens hold ten such turns with their observations; GRPO holds G of
# these episodes at once. Its episodes sample at GRPO_TEMPERATURE: the policy GRPO trains is the T = 1
# sampler, and a cooler draw measures another one. The [episodes] table of an experiment file sets the
# first three, its [eval] table the temperature. ``pdbgym demo`` runs one such file (``train/demo/demo.toml``),
# so its episodes are that file's.
EXPERIMENT_MAX_CONTEXT_TOKENS = 4_096
EXPERIMENT_TURN_BUDGET = 10
EXPERIMENT_MAX_NEW_TOKENS = 96

# Every command's episode defaults; docs/defaults.md's "Per command" table lists the same.
COMMAND_EPISODES: dict[str, EpisodeSettings] = {
    "run": EPISODE,
    "cache build": replace(EPISODE, top_p=TEACHER_TOP_P),
    "eval": EPISODE,
    "eval select": EPISODE,
    "train dagger": replace(EPISODE, max_context_tokens=DAGGER_MAX_CONTEXT_TOKENS),
    "train grpo": replace(EPISODE, max_context_tokens=GRPO_MAX_CONTEXT_TOKENS, temperature=GRPO_TEMPERATURE),
    "experiment run": replace(EPISODE, max_context_tokens=EXPERIMENT_MAX_CONTEXT_TOKENS,
                              turn_budget=EXPERIMENT_TURN_BUDGET, max_new_tokens=EXPERIMENT_MAX_NEW_TOKENS,
                              temperature=GRPO_TEMPERATURE),
}

# (command, episode setting) -> the value that command keeps instead of EPISODE's; docs/defaults.md's
# "Named exceptions" table lists the same rows. Every other episode setting of every command is EPISODE's.
EXCEPTIONS: dict[tuple[str, str], int | float] = {
    (command, name): value
    for command, settings in COMMAND_EPISODES.items()
    for name, value in asdict(settings).items() if value != getattr(EPISODE, name)
}


def episode_defaults_for(command: str) -> EpisodeSettings:
    """The episode settings ``command`` (``"eval"``, ``"train dagger"``, ...) plays with by default."""
    return COMMAND_EPISODES[command]
