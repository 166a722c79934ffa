"""The episode loop on a real env (real sandbox, real pdb, real pytest) with real turn sources."""

import asyncio

import pytest

from pdbgym.agent.backends.base import SamplingParams
from pdbgym.agent.backends.replay import ReplayBackend
from pdbgym.agent.backends.sglang import SGLangBackend
from pdbgym.agent.loop import AgentConfig, TurnSourceFailed, run_episode
from pdbgym.agent.scripted import ScriptedPolicy, scripted_actions
from pdbgym.agent.turns import ActionPolicyTurns, ModelTurns
from pdbgym.env import DebugEnv, EnvConfig
from pdbgym.rollouts.record import LogprobSemantics, tokenizer_fingerprint


def play(task, turns, agent=None, env=None):
    return asyncio.run(run_episode(task, turns, DebugEnv(task, env or EnvConfig()), agent or AgentConfig()))


def test_scripted_policy_yields_sft_ready_record_and_transcript(tiny_task, smol_tokenizer):
    outcome = play(tiny_task, ActionPolicyTurns(ScriptedPolicy(), smol_tokenizer, "text", "scripted"),
                   AgentConfig(dataset="unit", sample_idx=3))
    record = outcome.record
    assert record.termination_reason == "solved" and record.reward_score == 1.0
    n_actions = len(list(scripted_actions(tiny_task)))
    assert record.metadata["actions_used"] == n_actions
    assert {k: record.metadata[k] for k in ("instance_id", "_eval_dataset_name", "_sample_idx", "task_type")} == {
        "instance_id": "demo__sub", "_eval_dataset_name": "unit", "_sample_idx": 3, "task_type": "pdb_debug"}
    assert record.metadata["tokenizer"] == {"name": "SmolLM2-135M-Instruct", "vocab_size": 49152,
                                            "fingerprint": tokenizer_fingerprint(smol_tokenizer)}
    assert record.logprob_semantics == LogprobSemantics("deterministic", 1.0)  # a point mass: 0.0 is exact
    assert len(record.tokens) == record.prompt_len + record.response_length
    assert set(record.rollout_log_probs) == {0.0}
    # Each action's ids end with <|im_end|> under loss 1; template deltas sit between them under loss 0.
    eos = smol_tokenizer.eos_token_id
    ends = [i for i, t in enumerate(record.response_tokens) if t == eos and record.loss_mask[i] == 1]
    assert len(ends) == n_actions
    assert record.loss_mask[0] == 1 and record.loss_mask[ends[0] + 1] == 0
    text = smol_tokenizer.decode(record.tokens)
    assert text.count("<|im_start|>assistant\n```tool\n") == n_actions
    messages = outcome.transcript["messages"]
    assert [m["role"] for m in messages[:3]] == ["system", "user", "assistant"]
    assert outcome.transcript["env"]["result"]["final_test_passed"] is True
    assert outcome.env_seconds > outcome.model_seconds


def test_garbage_model_ends_only_its_episode_as_other(tiny_task, tiny_server, tiny_backend):
    backend = SGLangBackend.connect(tiny_server.url, tiny_backend.tokenizer)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=11)
    outcome = play(tiny_task, ModelTurns(backend, params), AgentConfig(sampling=params))
    asyncio.run(backend.aclose())
    record = outcome.record
    assert record.termination_reason == "other" and record.reward_score == 0.0
    assert "3 malformed tool calls in a row" in outcome.transcript["env"]["result"]["detail"]
    assert record.metadata["actions_used"] == 0
    generated = [lp for lp, m in zip(record.rollout_log_probs, record.loss_mask, strict=True) if m]
    assert len(generated) >= 3 and all(lp < 0 for lp in generated)
    assert sum(record.loss_mask) == len(generated)
    errors = [m["content"] for m in outcome.transcript["messages"] if m["content"].startswith("Error:")]
    assert len(errors) == 2 and "```tool" in errors[0]  # the model is shown how to call a tool
    assert record.logprob_semantics.engine == "sglang"


def test_context_budget_ends_as_ctx_overflow(tiny_task, tiny_backend):
    params = SamplingParams(temperature=1.0, max_new_tokens=64, seed=2)
    agent = AgentConfig(sampling=params, max_context_tokens=10)  # smaller than the prompt itself
    outcome = play(tiny_task, ModelTurns(tiny_backend, params), agent)
    assert outcome.record.termination_reason == "ctx_overflow"
    assert outcome.record.response_length == 0


def test_turn_budget_ends_as_budget(tiny_task, smol_tokenizer):
    outcome = play(tiny_task, ActionPolicyTurns(ScriptedPolicy(), smol_tokenizer, "text", "scripted"),
                   env=EnvConfig(turn_budget=2))
    assert outcome.record.termination_reason == "budget"
    assert outcome.record.metadata["actions_used"] == 2


def test_a_backend_failure_mid_episode_is_no_episode_and_the_env_is_closed(tiny_task, smol_tokenizer):
    """A turn source that raises (here a replay running out after one turn) says nothing about the
    policy: run_episode raises TurnSourceFailed instead of recording an unsolved episode, and the env's
    workspace is gone."""
    ids = smol_tokenizer('```tool\n{"tool": "view", "args": {"path": "calc/ops.py"}}\n```',
                         add_special_tokens=False)["input_ids"] + [smol_tokenizer.eos_token_id]
    backend = ReplayBackend(smol_tokenizer, [(ids, [-0.5] * len(ids))], LogprobSemantics("replay", 1.0))
    env = DebugEnv(tiny_task, EnvConfig())
    with pytest.raises(TurnSourceFailed, match="has no turn 2"):
        asyncio.run(run_episode(tiny_task, ModelTurns(backend, SamplingParams()), env, AgentConfig()))
    assert env.workspace is None and env.result is None  # closed, and no result was graded


def test_native_format_path_renders_tools_and_tool_role(tiny_task, smol_tokenizer):
    # SmolLM2's ChatML renders any role, so the loop's native-format path (tools=, role "tool") runs
    # end to end here; the ids still decode to the transcript.
    fmt = "qwen3_xml"
    outcome = play(tiny_task, ActionPolicyTurns(ScriptedPolicy(), smol_tokenizer, fmt, "scripted"),
                   AgentConfig(tool_format=fmt), EnvConfig(turn_budget=2))
    text = smol_tokenizer.decode(outcome.record.tokens)
    assert "<|im_start|>tool\n" in text and "<tool_call>" in text
    assert outcome.record.termination_reason == "budget"


def test_episode_threads_finishing_together_hash_the_vocabulary_once(smol_tokenizer):
    import copy
    import threading

    fresh = copy.copy(smol_tokenizer)
    fresh.__dict__.pop("_pdbgym_fingerprint", None)
    reads, vocabulary = [], fresh.get_vocab
    fresh.get_vocab = lambda: reads.append(1) or vocabulary()
    start = threading.Barrier(8)
    found = []

    def first_record() -> None:
        start.wait()
        found.append(tokenizer_fingerprint(fresh))

    threads = [threading.Thread(target=first_record) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == [tokenizer_fingerprint(smol_tokenizer)] * 8 and len(reads) == 1
