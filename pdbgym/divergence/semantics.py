"""Which transform a cache's log-probs are under, and refusing to guess when nobody says."""

from __future__ import annotations

from collections.abc import Sequence

from pdbgym.errors import PdbgymError
from pdbgym.rollouts.record import LogprobSemantics, RolloutRecord

SEMANTICS_HELP = """\
The cached log-probs' transform decides what the student must be scored under. Known producers:
  * SGLang (recent, normal sampling): log_softmax(logits / T) -- temperature applied, top-p NOT
    renormalized -> --temperature T --no-renormalized (the seed cache: most likely T=0.7).
  * SGLang before PR #5961: top-p renormalized -> --temperature T --top-p P --renormalized.
  * SGLang with SGLANG_RETURN_ORIGINAL_LOGPROB, and SGLang/vLLM prompt (echo) log-probs: T=1 raw
    -> --temperature 1.
  * vLLM --logprobs-mode raw_logprobs (its default): before temperature -> --temperature 1.
  * vLLM processed_logprobs: after temperature and top-p, renormalized over the nucleus
    -> --temperature T --top-p P --renormalized.
If unsure, re-score the cache with the teacher itself (--teacher) and compare."""


class SemanticsError(PdbgymError):
    """The log-prob transform is unknown, contradictory or unusable."""


class NotModelLogprobsError(SemanticsError):
    """The cached log-probs are not a model's own: drawn under a grammar, or absent (engine ``none``)."""


def check_teacher_logprobs(semantics: LogprobSemantics, *, rescored: bool = False) -> None:
    """Refuse a cache whose log-probs cannot stand for the teacher's (``NotModelLogprobsError``).

    Engine ``deterministic`` (a scripted teacher) passes: its log-prob 0.0 is exact, so KL(T||S) per
    token is -log S(y), the student's cross-entropy on the teacher's tokens, which k1 gives exactly
    (k3 assumes the student's support lies in the teacher's and reads low there).

    Constrained log-probs are of a grammar-masked, renormalized distribution: the samples were not
    drawn from the model, so no re-scoring helps. Engine ``none`` log-probs are 0.0 placeholders (a
    text-only server, scripted or human turns); ``rescored`` (the teacher model re-scores the cache
    and the cached values are not used) lets such a cache through.
    """
    if semantics.constrained:
        raise NotModelLogprobsError(
            f"the cache's tokens were drawn under a grammar ({semantics.grammar or 'unnamed'}): its log-probs "
            "are of the grammar-masked, renormalized distribution, not the model's own, and its samples are "
            "not the model's, so a KL against it measures the grammar. Build the teacher cache without the "
            "constrained: prefix (--policy MODEL) to compare models")
    if semantics.engine == "none" and not rescored:
        raise NotModelLogprobsError(
            "the cache's producer returned no log-probs (engine 'none': a text-only server such as "
            "transformers serve, or scripted/human turns); its 0.0 values are placeholders, not the teacher's "
            "log-probs. Build the cache with a backend that returns log-probs (a local model, SGLang, vLLM), "
            "or give the teacher model and --rescore-teacher (without --noise-floor)")


def declared_semantics(records: Sequence[RolloutRecord]) -> LogprobSemantics | None:
    """The one transform the records declare, None if none declares one; error if they disagree."""
    seen = {r.logprob_semantics for r in records} - {None}
    if len(seen) > 1:
        listed = ", ".join(sorted(str(s) for s in seen))
        raise SemanticsError(
            f"the records declare {len(seen)} different log-prob transforms ({listed}); score each "
            "group separately (e.g. one cache per producer)"
        )
    missing = sum(r.logprob_semantics is None for r in records)
    if seen and missing:
        raise SemanticsError(
            f"{missing} of {len(records)} records declare no log-prob transform while the others do; "
            "fix the cache so every record carries metadata['logprob_semantics']"
        )
    return next(iter(seen)) if seen else None


def resolve_semantics(
    records: Sequence[RolloutRecord], explicit: LogprobSemantics | None
) -> LogprobSemantics:
    """The transform to score under: the cache's own, else ``explicit``; refuse when neither says.

    A declared transform that contradicts ``explicit`` is an error, not an override: scoring under
    the wrong transform silently measures the transform instead of the models.
    """
    declared = declared_semantics(records)
    if declared is None and explicit is None:
        raise SemanticsError(
            "the cache does not say which transform its log-probs are under, and none was given.\n"
            + SEMANTICS_HELP
        )
    if declared is not None and explicit is not None and not same_transform(declared, explicit):
        raise SemanticsError(
            f"the cache declares {describe(declared)} but {describe(explicit)} was given; drop the "
            "explicit options to use the cache's, or fix the cache's metadata['logprob_semantics']"
        )
    return declared if declared is not None else explicit  # type: ignore[return-value]


def same_transform(a: LogprobSemantics, b: LogprobSemantics) -> bool:
    """Equal as transforms (the engine label does not matter; top-p matters only when renormalized)."""
    if abs(a.temperature - b.temperature) > 1e-9 or a.top_p_renormalized != b.top_p_renormalized:
        return False
    return not a.top_p_renormalized or abs(a.top_p - b.top_p) < 1e-9


def describe(semantics: LogprobSemantics) -> str:
    nucleus = (
        f"top-p {semantics.top_p} renormalized" if semantics.top_p_renormalized else "no top-p renormalization"
    )
    return f"temperature {semantics.temperature}, {nucleus} ({semantics.engine})"


def explicit_semantics(temperature: float | None, top_p: float | None,
                       renormalized: bool | None) -> LogprobSemantics | None:
    """The transform stated by ``--temperature``/``--top-p``/``--renormalized``, or None when none is given.

    A partial statement is refused (``SemanticsError``): top-p without the temperature it was applied
    at, top-p below 1 without saying whether the log-probs were renormalized, renormalized without top-p.
    """
    if temperature is None:
        if top_p is not None or renormalized is not None:
            raise SemanticsError("--top-p/--renormalized need --temperature too (the cached log-probs' T)")
        return None
    if top_p is not None and top_p < 1.0 and renormalized is None:
        raise SemanticsError(
            "with --top-p below 1, say whether the cached log-probs were renormalized over the nucleus: "
            "--renormalized or --no-renormalized.\n" + SEMANTICS_HELP
        )
    if renormalized and top_p is None:
        raise SemanticsError("--renormalized needs --top-p P (the nucleus mass the log-probs were renormalized to)")
    return LogprobSemantics(engine="cli", temperature=temperature, top_p=1.0 if top_p is None else top_p,
                            top_p_renormalized=bool(renormalized))
