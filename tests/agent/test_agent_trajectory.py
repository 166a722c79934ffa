"""Token-exact trajectories: template deltas, the decode check, and a drift case re-encoding would break."""

import asyncio

import pytest

from pdbgym.agent.backends.base import SamplingParams
from pdbgym.agent.backends.replay import ReplayBackend
from pdbgym.agent.loop import AgentConfig, run_episode
from pdbgym.agent.toolcalls import render_tool_call
from pdbgym.agent.trajectory import ChatTemplate, TrajectoryDriftError, check_decodes_to
from pdbgym.agent.turns import ModelTurns
from pdbgym.env import Action, DebugEnv, EnvConfig
from pdbgym.rollouts.record import LogprobSemantics


def test_observation_delta_is_the_template_text_between_turns(smol_tokenizer):
    template = ChatTemplate(smol_tokenizer, "user", None)
    closed = template.observation_delta("OBS", "<|im_end|>")
    assert closed == "\n<|im_start|>user\nOBS<|im_end|>\n<|im_start|>assistant\n"
    unclosed = template.observation_delta("OBS", None)  # the turn hit its token cap: close it for the model
    assert unclosed == "<|im_end|>" + closed


def non_canonical_ids(tokenizer, text):
    """``text`` tokenized canonically, except one multi-character token split into two shorter ones."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    vocab = tokenizer.get_vocab()
    for position, token_id in enumerate(ids):
        piece = tokenizer.convert_ids_to_tokens(token_id)
        for cut in range(1, len(piece)):
            if piece[:cut] in vocab and piece[cut:] in vocab:
                return ids[:position] + [vocab[piece[:cut]], vocab[piece[cut:]]] + ids[position + 1:]
    raise AssertionError(f"no splittable token in {text!r}")


def test_sampled_ids_survive_even_when_reencoding_would_change_them(tiny_task, smol_tokenizer):
    text = render_tool_call(Action("submit", {}), "text")
    sampled = non_canonical_ids(smol_tokenizer, text) + [smol_tokenizer.eos_token_id]
    decoded = smol_tokenizer.decode(sampled, skip_special_tokens=False)
    # The precondition that makes this test meaningful: decode -> encode does not give the sampled ids back.
    assert smol_tokenizer(decoded, add_special_tokens=False)["input_ids"] != sampled
    logprobs = [-0.25 - 0.01 * i for i in range(len(sampled))]
    semantics = LogprobSemantics("replay", 0.7)
    backend = ReplayBackend(smol_tokenizer, [(sampled, logprobs)], semantics)
    turns = ModelTurns(backend, SamplingParams())
    outcome = asyncio.run(run_episode(tiny_task, turns, DebugEnv(tiny_task, EnvConfig()), AgentConfig()))
    record = outcome.record
    assert record.termination_reason == "finish_unresolved"
    generated = record.tokens[record.prompt_len:record.prompt_len + len(sampled)]
    assert generated == sampled, "the trajectory must hold the ids as sampled, not a re-tokenization"
    assert record.rollout_log_probs[:len(sampled)] == logprobs
    assert record.loss_mask[:len(sampled)] == [1] * len(sampled)
    assert record.response_length == len(sampled)  # submit ends the episode: no observation follows
    assert record.logprob_semantics == semantics


def test_decode_check_names_where_ids_and_text_part(smol_tokenizer):
    ids = smol_tokenizer("return a - b", add_special_tokens=False)["input_ids"]
    check_decodes_to(smol_tokenizer, ids, "return a - b")
    with pytest.raises(TrajectoryDriftError, match="char 9"):
        check_decodes_to(smol_tokenizer, ids, "return a + b", where="demo")
