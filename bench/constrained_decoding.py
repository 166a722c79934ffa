"""Constrained tool calls on the embedded SmolLM2-135M: generation speed and valid-call rate.

One prompt (the agent's system prompt for the ``text`` format and a fixed first observation, through
the chat template) is continued ``--turns`` times per arm with the same seeds and sampling, by the
embedded model unconstrained (baseline) and with the tool-call grammar (``constrained:embedded``),
through the backend's own engine (``pdbgym.engine``). Printed per arm: generated tokens, model seconds, tokens/s
and the share of turns that parse as a schema-valid tool call; then the tokens/s ratio constrained /
unconstrained (below 1: what the grammar mask costs per token). Grammar compilation is timed apart.

Usage: .venv/bin/python bench/constrained_decoding.py [--turns 3] [--max-new-tokens 160]
       [--torch-threads N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

OBSERVATION = ("Task: tests/test_grants.py::test_inherited_grants fails: a member of a child group does not "
               "get the parent's grants.\n> /repo/app/access.py(12)grants_for()\n-> for group in user.groups:\n(Pdb)")


def run_arm(backend, prompt_ids: list[int], turns: int, max_new_tokens: int, mask_factory) -> dict:
    from pdbgym.agent.backends.base import SamplingParams
    from pdbgym.agent.toolcalls import ToolCallError, parse_tool_call
    from pdbgym.engine import EngineRequest
    from pdbgym.env.tools import ActionError, check_args

    tokens = valid = 0
    seconds = 0.0
    for seed in range(turns):
        params = SamplingParams(temperature=0.7, max_new_tokens=max_new_tokens, seed=seed)
        started = time.perf_counter()
        ids = backend.engine.submit(EngineRequest(prompt_ids, params.max_new_tokens, params.temperature,
                                                  params.top_p, params.seed, "tempered", mask_factory())).result().ids
        seconds += time.perf_counter() - started
        tokens += len(ids)
        text = backend.tokenizer.decode([i for i in ids if i not in backend.stops])
        try:
            check_args(parse_tool_call(text, "text"))
            valid += 1
        except (ToolCallError, ActionError):
            pass
    return {"tokens": tokens, "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 2),
            "turns": turns, "valid_call_rate": round(valid / turns, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--torch-threads", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    from pdbgym.agent.backends.embedded import load_embedded_backend
    from pdbgym.agent.constrained import TurnMask, compile_constraint
    from pdbgym.agent.prompts import system_prompt
    from pdbgym.env.tools import tool_specs

    backend = load_embedded_backend()
    messages = [{"role": "system", "content": system_prompt("text", tool_specs())},
                {"role": "user", "content": OBSERVATION}]
    prompt_ids = list(backend.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                            return_dict=False))
    started = time.perf_counter()
    vocab = backend.model.get_output_embeddings().weight.shape[0]
    constraint = compile_constraint(backend.tokenizer, vocab, backend.stops, "text", args.max_new_tokens)
    compile_s = time.perf_counter() - started
    base = run_arm(backend, prompt_ids, args.turns, args.max_new_tokens, lambda: None)
    constrained = run_arm(backend, prompt_ids, args.turns, args.max_new_tokens, lambda: TurnMask(constraint))
    ratio = constrained["tokens_per_s"] / base["tokens_per_s"]
    summary = {"prompt_tokens": len(prompt_ids), "grammar_compile_s": round(compile_s, 2),
               "unconstrained": base, "constrained": constrained,
               "tokens_per_s_ratio_constrained_over_unconstrained": round(ratio, 3)}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"prompt {len(prompt_ids)} tokens; grammar compiled in {compile_s:.2f} s")
    for name, arm in (("unconstrained", base), ("constrained", constrained)):
        print(f"{name:>14}: {arm['tokens']} tokens in {arm['seconds']} s = {arm['tokens_per_s']} tokens/s; "
              f"valid calls {arm['valid_call_rate']} of {arm['turns']} turns")
    print(f"tokens/s constrained / unconstrained: {ratio:.3f}")


if __name__ == "__main__":
    main()
