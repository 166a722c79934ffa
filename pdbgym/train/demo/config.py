"""The config of ``pdbgym demo``: its flags are fields of the same name (``episode``'s by their own names)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pdbgym.episode_defaults import EpisodeSettings, check_setting, episode_defaults_for


@dataclass
class DemoConfig:
    """The demo's budget; defaults fit about 10 minutes on 2 CPU cores (docs/benchmarks.md).

    Args:
        out: demo folder; a rerun reuses every finished phase. Default ``runs/demo``.
        base: the student: ``embedded`` (SmolLM2-135M-Instruct) or a HF model folder. Default ``embedded``.
        teacher: ``scripted`` (oracle: replays the reference fix), ``embedded``, a model folder or a URL.
        tasks: suite or folder split into train and held-out. Default ``builtin`` (21 tasks).
        held_out: share of tasks (whole source-module groups) held out for evaluation. Default 0.25.
        seed: seed of the split, the caches, SFT and sampling. Default 0.
        sft_steps: optimizer steps of SFT (one example per step). Default 12.
        sft_tokens: each example cut to its first N ids (prompt ~720 + first tool calls). Default 1024.
        rank: LoRA rank r (alpha 2r). Default 16.
        lr: peak AdamW learning rate, linear decay. Default 1e-3 (a short run).
        eval_runs: episodes per held-out task per arm. Default 1.
        episode: the held-out episodes' settings. Default the demo's named exceptions
            (``pdbgym.episode_defaults``): 8 tool calls (the oracle uses 8 on each built-in task), 64 tokens
            a turn (a pdb call is 20-60 tokens), 8,192 tokens of context (SmolLM2-135M's); T 0.7, top-p 1.
        constrained: add the base model with grammar-constrained tool calls as an arm. Default False.
        kl_tokens: KL scored on the first N ids of each held-out oracle episode (0: whole). Default 1024.
        workers: episodes at once (scripted ones in worker processes; 1: all in this process). Default 2.
        threads: torch threads of training and KL scoring (episodes use 1). Default 2.
    """

    out: Path = Path("runs/demo")
    base: str = "embedded"
    teacher: str = "scripted"
    tasks: str = "builtin"
    held_out: float = 0.25
    seed: int = 0
    sft_steps: int = 12
    sft_tokens: int = 1024
    rank: int = 16
    lr: float = 1e-3
    eval_runs: int = 1
    episode: EpisodeSettings = episode_defaults_for("demo")
    constrained: bool = False
    kl_tokens: int = 1024
    workers: int = 2
    threads: int = 2

    def __post_init__(self) -> None:
        check_setting("eval_runs", self.eval_runs, rule="runs")
