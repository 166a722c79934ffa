"""Why an episode ended: the one list every layer uses, in the teacher cache's order.

- ``solved``: the grader ran the pristine tests and every FAIL_TO_PASS and PASS_TO_PASS test passed.
- ``finish_unresolved``: the agent submitted (or the run ended normally) and the tests did not all pass.
- ``ctx_overflow``: the conversation outgrew the model's context window.
- ``budget``: the turn budget ran out before the agent submitted.
- ``other``: anything else (malformed tool calls in a row, an interrupted run, the workspace left over
  its disk cap: ``pdbgym.sandbox.diskguard``). A failing backend ends no episode: ``run_episode`` raises
  ``TurnSourceFailed`` and the episode counts as not run.
- ``tampered``: the grading run's result channel showed forgery (a duplicate or late outcome, a
  forged end record, pytest internals replaced), or the agent moved, removed or replaced its workspace
  folder (never graded then); graded unsolved and counted apart.

Apart from the reason, an episode is *verdict-refused* when its grading refused to pass anything from
the grading run because the run ended abnormally (killed by a signal, an exit status disagreeing with
the end record, no pytest closing line, a result channel that no longer names the original pipe):
``grading["refused"]`` is non-empty and the episode is not tampered. A crash can be honest, so these
are not tampered, but they pass nothing; reports count them beside the tampered ones.
"""

from __future__ import annotations

from collections.abc import Mapping

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
    "tampered": "the grading run showed forgery of test results, or the agent moved its workspace folder; graded "
                "unsolved",
}


def verdict_refused(grading: Mapping[str, object] | None, termination_reason: str | None = None) -> bool:
    """Whether an episode's grading (``GradeResult.to_dict()``; a missing ``refused`` key is ``[]``) refused
    the run's verdict without the episode being tampered (``termination_reason`` or ``grading["tampered"]``)."""
    grading = grading or {}
    return bool(grading.get("refused")) and not grading.get("tampered") and termination_reason != "tampered"


def transcript_grading(transcript: Mapping[str, object]) -> dict[str, object]:
    """The grading dict of an episode's transcript (``transcript["env"]["result"]["grading"]``; ``{}`` if none)."""
    env = transcript.get("env")
    result = env.get("result") if isinstance(env, Mapping) else None
    grading = result.get("grading") if isinstance(result, Mapping) else None
    return dict(grading) if isinstance(grading, Mapping) else {}
