"""Which transform to score under: the cache's, the user's, or a refusal that explains the choice."""

from __future__ import annotations

import numpy as np
import pytest
from div_models import make_record

from pdbgym.divergence.semantics import SemanticsError, explicit_semantics, resolve_semantics
from pdbgym.rollouts.record import LogprobSemantics

SGLANG = LogprobSemantics(engine="sglang", temperature=0.7, top_p=0.9, top_p_renormalized=False)


def records(semantics_per_record):
    rng = np.random.default_rng(0)
    return [make_record(rng, f"t{i}", 4, 6, semantics=s) for i, s in enumerate(semantics_per_record)]


def test_unknown_and_not_given_is_refused_with_the_choices_explained():
    with pytest.raises(SemanticsError) as info:
        resolve_semantics(records([None, None]), None)
    message = str(info.value)
    for hint in ("SGLang", "vLLM", "raw_logprobs", "--temperature", "--renormalized"):
        assert hint in message


def test_cache_declared_semantics_is_used():
    assert resolve_semantics(records([SGLANG, SGLANG]), None) == SGLANG


def test_explicit_semantics_fills_in_for_a_silent_cache():
    given = LogprobSemantics(engine="cli", temperature=1.0)
    assert resolve_semantics(records([None]), given) == given


def test_contradicting_the_cache_is_an_error_but_agreeing_is_fine():
    with pytest.raises(SemanticsError, match="declares"):
        resolve_semantics(records([SGLANG]), LogprobSemantics(engine="cli", temperature=1.0))
    same = LogprobSemantics(engine="cli", temperature=0.7, top_p=0.5, top_p_renormalized=False)
    assert resolve_semantics(records([SGLANG]), same) == SGLANG  # top-p is irrelevant without renorm


def test_mixed_or_partial_declarations_are_refused():
    other = LogprobSemantics(engine="vllm:raw_logprobs", temperature=1.0)
    with pytest.raises(SemanticsError, match="different"):
        resolve_semantics(records([SGLANG, other]), None)
    with pytest.raises(SemanticsError, match="declare no"):
        resolve_semantics(records([SGLANG, None]), None)


def test_command_line_options_build_the_transform_or_explain_what_is_missing():
    assert explicit_semantics(None, None, None) is None
    assert explicit_semantics(0.7, None, None) == LogprobSemantics("cli", 0.7, 1.0, False)
    assert explicit_semantics(0.7, 0.9, True) == LogprobSemantics("cli", 0.7, 0.9, True)
    with pytest.raises(SemanticsError, match="need --temperature"):
        explicit_semantics(None, 0.9, True)
    with pytest.raises(SemanticsError, match="--no-renormalized"):
        explicit_semantics(0.7, 0.9, None)
    with pytest.raises(SemanticsError, match="needs --top-p"):
        explicit_semantics(0.7, None, True)


def test_deterministic_teacher_passes_and_absent_logprobs_do_not():
    """A scripted teacher's 0.0 log-probs are exact (a point mass); a producer without log-probs is refused."""
    from pdbgym.divergence.semantics import NotModelLogprobsError, check_teacher_logprobs
    from pdbgym.rollouts.record import LogprobSemantics

    check_teacher_logprobs(LogprobSemantics("deterministic", 1.0))
    with pytest.raises(NotModelLogprobsError, match="engine 'none'"):
        check_teacher_logprobs(LogprobSemantics("none", 1.0))
