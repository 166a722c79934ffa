"""A toy GRPO suite a tiny random model can learn in a few steps, and a script that trains on it.

Each toy episode has two model turns (up to ``TURN_TOKENS`` ids each, sampled by the same
``BatchedGenerator`` the real rollout uses, every episode of the step in one batched call) with a fixed
"observation" of env ids between them (env_mask 0). The episode counts as solved when
the first id it samples is among ``TARGET_WORDS``: about 40% of random episodes at the start,
learnable by raising those ids' probability after the prompt. The tasks are real task folders (``taskfixtures.make_task``), so the
run goes through ``train_grpo`` unchanged except for what plays an episode.

Run as a script (the resume test kills it): ``python grpo_toy.py OUT STEPS [--resume]``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

VOCAB = 12
TARGET_WORDS = ("w2", "w3", "w4", "w6", "w9")
TURN_TOKENS = 2
OBSERVATION_WORDS = "w5 w6 w7"


def make_toy_model(folder: Path) -> Path:
    """A 1-layer Llama over a 12-word vocabulary, saved with its tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from modelfixtures import word_tokenizer

    tokenizer = word_tokenizer(VOCAB)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         tie_word_embeddings=False, eos_token_id=tokenizer.eos_token_id,
                         initializer_range=0.5)  # logits far from uniform: the untrained lm_head can express a change
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_toy_tasks(root: Path, count: int = 2, prefix: str = "toy") -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from taskfixtures import make_task

    for index in range(count):
        make_task(root / f"{prefix}{index}", instance_id=f"{prefix}__{index}")
    return root


def toy_play(tasks: list[Any], trainer: Any, turn_budget: int, temperature: float,
             seeds: list[int] | None = None) -> list[Any]:
    """Two-turn toy episodes for ``tasks``, generated together (one batched call per turn); each turn's draw is
    seeded from the episode's seed (as GRPO passes them; the episode's index when none) and the turn."""
    from pdbgym.agent.backends.base import GenerationRequest, SamplingParams
    from pdbgym.train.grpo.rollout import BatchedGenerator, EpisodeSample

    tokenizer = trainer.processing_class
    generator = BatchedGenerator(trainer.model, tokenizer)
    targets = {tokenizer.convert_tokens_to_ids(word) for word in TARGET_WORDS}
    observation = tokenizer(OBSERVATION_WORDS, add_special_tokens=False)["input_ids"]
    base = list(seeds) if seeds is not None else list(range(len(tasks)))
    prompts = [tokenizer(f"w{4 + index % 4} w8", add_special_tokens=False)["input_ids"] for index in range(len(tasks))]
    trajectories: list[list[tuple[list[int], list[float], int]]] = [[] for _ in tasks]
    contexts = [list(p) for p in prompts]
    for turn in range(2):
        turns = generator.generate_batch([GenerationRequest(c, [], None, SamplingParams(
            temperature, 1.0, TURN_TOKENS, base[index] * 2 + turn)) for index, c in enumerate(contexts)])
        for index, generation in enumerate(turns):
            trajectories[index].append((generation.token_ids, generation.logprobs, 1))
            contexts[index] += generation.token_ids
            if turn == 0:
                trajectories[index].append((observation, [0.0] * len(observation), 0))
                contexts[index] += observation
    generator.close()
    samples = []
    for task, prompt, segments in zip(tasks, prompts, trajectories, strict=True):
        ids = [i for seg in segments for i in seg[0]]
        logprobs = [x for seg in segments for x in seg[1]]
        mask = [seg[2] for seg in segments for _ in seg[0]]
        model_ids = [i for i, m in zip(ids, mask, strict=True) if m]
        solved = bool(model_ids) and model_ids[0] in targets
        facts = {"instance_id": task.instance_id, "final_test_passed": solved,
                 "termination_reason": "solved" if solved else "finish_unresolved", "turns": 2,
                 "valid_tool_call_rate": 1.0}
        samples.append(EpisodeSample(list(prompt), ids, logprobs, mask, facts))
    return samples


def make_toy_sft_adapter(model_dir: Path, out: Path) -> Path:
    """A DoRA adapter over the toy model with non-zero deltas: the frozen SFT layer of a stack."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, use_dora=True, target_modules="all-linear",
                                                  task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5)
    peft_model.save_pretrained(out)
    return out


def toy_config(out: Path, model: Path, tasks: Path, steps: int, **overrides: Any) -> Any:
    from pdbgym.train.grpo.config import GRPORunConfig

    settings: dict[str, Any] = dict(policy=str(model), tasks=str(tasks), out=out, group=8, tasks_per_step=2,
                                    steps=steps, lr=2e-2, rank=8, alpha=16, beta=0.005, target_kl=0.05, kl_horizon_steps=5,
                                    save_steps=2, device="cpu", curriculum="fixed", budget_start=2, budget_end=2,
                                    store=out.parent / "store", ledger=out.parent / "ledger.jsonl", seed=7)
    settings.update(overrides)
    return GRPORunConfig(**settings)


def main(argv: list[str]) -> None:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    from pdbgym.train.grpo.run import train_grpo

    out, steps, resume = Path(argv[0]), int(argv[1]), "--resume" in argv
    root = out.parent
    model = root / "toy-model" if (root / "toy-model").is_dir() else make_toy_model(root / "toy-model")
    tasks = root / "toy-tasks" if (root / "toy-tasks").is_dir() else make_toy_tasks(root / "toy-tasks")
    train_grpo(toy_config(out, model, tasks, steps, save_steps=1, resume=resume), play=toy_play)


if __name__ == "__main__":
    main(sys.argv[1:])
