"""Why an episode ended: the one list every layer uses, in the teacher cache's order.

- ``solved``: the grader ran the pristine tests and every FAIL_TO_PASS and PASS_TO_PASS test passed.
- ``finish_unresolved``: the agent submitted (or the run ended normally) and the tests did not all pass.
- ``ctx_overflow``: the conversation outgrew the model's context window.
- ``budget``: the turn budget ran out before the agent submitted.
- ``other``: anything else (malformed tool calls in a row, an interrupted run, the workspace left over
  its disk cap: ``pdbgym.env.diskguard``). A failing backend ends no episode: ``run_episode`` raises
  ``TurnSourceFailed`` and the episode counts as not run.
- ``tampered``: the grading run's result channel showed forgery (a duplicate or late outcome, a
  forged end record, pytest internals replaced); graded unsolved and counted apart.
"""

from __future__ import annotations

TERMINATION_REASONS: tuple[str, ...] = (
    "solved", "finish_unresolved", "ctx_overflow", "budget", "other", "tampered",
)

TERMINATION_MEANINGS: dict[str, str] = {
    "solved": "every FAIL_TO_PASS and PASS_TO_PASS test passed on pristine tests",
    "finish_unresolved": "the agent submitted but the grader's tests did not all pass",
    "ctx_overflow": "the conversation outgrew the model's context window",
    "budget": "the turn budget ran out before the agent submitted",
    "other": "ended otherwise (malformed tool calls in a row, an interruption, the workspace left over its "
             "disk cap)",
    "tampered": "the grading run showed forgery of test results; graded unsolved",
}
