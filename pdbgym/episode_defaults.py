"""The one home of episode defaults: every command and config that plays agent episodes starts from these.

``pdbgym run``, ``cache build``, ``eval``, ``eval select``, ``train dagger``, ``train grpo`` and ``demo``
(and the configs behind them: ``EnvConfig``, ``SamplingParams``, ``AgentConfig``, ``CacheBuildConfig``,
``EvalConfig``, ``SelectConfig``, ``CampaignConfig``, ``DaggerConfig``, ``GRPORunConfig``, ``DemoConfig``) read their
episode settings from ``EPISODE``, so the same model behaves alike under each of them. A command that
keeps another value on purpose does so through one of the named constants below, each saying why;
``EXCEPTIONS`` lists them, and docs/defaults.md holds the same table (``tests/test_cli_defaults.py``
holds the three together).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EpisodeDefaults:
    """The settings of one agent episode, as every command defaults them.

    Args:
        max_context_tokens: trajectory cap in tokens (prompt + every turn); reaching it ends the episode as
            ``ctx_overflow``. 32,768, the native context of current tool-calling models: teacher caches
            were built at it while ``eval`` stopped at 8,192, so the same model's long episodes ran on
            in one and counted as ``ctx_overflow`` in the other.
        turn_budget: tool calls per episode before ``budget`` ends it (malformed calls count).
        temperature: sampling temperature of a model policy (0 = greedy).
        top_p: nucleus mass of a model policy (1.0: no truncation).
        max_new_tokens: token cap of one model turn.
    """

    max_context_tokens: int = 32_768
    turn_budget: int = 30
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 512


EPISODE = EpisodeDefaults()

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

# ``pdbgym demo`` is the loop in miniature on CPU, on the embedded SmolLM2-135M: its held-out episodes keep
# that model's own context (8,192 positions), the 8 tool calls the oracle needs on each built-in task, and
# 64 tokens a turn (a pdb call is 20-60 tokens), so the whole demo runs in minutes on two cores.
DEMO_MAX_CONTEXT_TOKENS = 8_192
DEMO_TURN_BUDGET = 8
DEMO_MAX_NEW_TOKENS = 64

# (command, episode setting) -> the value that command keeps instead of EPISODE's; docs/defaults.md
# lists the same rows. Every other episode setting of every command defaults to EPISODE's value.
EXCEPTIONS: dict[tuple[str, str], int | float] = {
    ("cache build", "top_p"): TEACHER_TOP_P,
    ("train grpo", "max_context_tokens"): GRPO_MAX_CONTEXT_TOKENS,
    ("train grpo", "temperature"): GRPO_TEMPERATURE,
    ("train dagger", "max_context_tokens"): DAGGER_MAX_CONTEXT_TOKENS,
    ("demo", "max_context_tokens"): DEMO_MAX_CONTEXT_TOKENS,
    ("demo", "turn_budget"): DEMO_TURN_BUDGET,
    ("demo", "max_new_tokens"): DEMO_MAX_NEW_TOKENS,
}
