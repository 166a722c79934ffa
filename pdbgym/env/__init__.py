"""The debugging environment: tools, episodes, grading."""

from pdbgym.env.environment import TERMINATION_REASONS, DebugEnv, EnvConfig, EpisodeResult
from pdbgym.env.tools import TOOL_NAMES, Action, ActionError, StepResult, tool_specs

__all__ = [
    "TERMINATION_REASONS",
    "TOOL_NAMES",
    "Action",
    "ActionError",
    "DebugEnv",
    "EnvConfig",
    "EpisodeResult",
    "StepResult",
    "tool_specs",
]
