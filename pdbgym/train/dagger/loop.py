"""``pdbgym train dagger``: online DAgger through pdbgym's episode loop and the SFT trainer.

Each iteration i:

1. the current student (the given model for i = 0, else adapter ``iter{i-1}`` stacked on its lineage)
   plays ``runs`` episodes per training task (``pdbgym.agent.loop.run_episode``, real pdb sessions),
   kept as a rollout cache (``iter{i}/rollouts``) with transcripts;
2. every assistant turn of those episodes is a state: the ids before it (the student's own history,
   exactly as its record holds them). The teacher, given those ids, samples its own next turn; the
   pair (state ids with mask 0, teacher ids with mask 1) is one labelled example, token-exact;
3. labels of all iterations so far are aggregated (deduplicated by content) into a corpus;
4. adapter ``iter{i}`` is trained on it by SFT from the same parent as iteration 0 (the student's own
   weights), and registered in the store under ``{prefix}-iter{i}``;
5. the iterate is evaluated: pass@1 on the val tasks (episodes, ``pdbgym.evaluate`` statistics) and,
   given a teacher cache, KL(teacher || student) per token on it (``pdbgym.divergence.tocache.kl_to_cache``).

The teacher must be able to answer an arbitrary state: a model (``embedded``, a folder, a store
reference) or an SGLang server URL (``/generate`` takes ids, so the state is conditioned on exactly).
The scripted policy cannot: it replays the task's reference fix whatever state it is in. An
OpenAI-chat server re-renders messages, so its turn is not conditioned on the student's exact ids.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pdbgym.adapters.store import Store
from pdbgym.agent.backends.base import GenerationRequest, SamplingParams
from pdbgym.agent.backends.hf import HFBackend
from pdbgym.agent.backends.sglang import SGLangBackend
from pdbgym.agent.loop import AgentConfig, check_tool_turns, run_episode
from pdbgym.agent.policies import load_tokenizer
from pdbgym.agent.toolcalls import detect_format
from pdbgym.agent.turns import ModelTurns
from pdbgym.divergence.tocache import kl_to_cache as kl_of_model
from pdbgym.divergence.tocache import open_teacher_cache
from pdbgym.env import DebugEnv, EnvConfig
from pdbgym.errors import PdbgymError
from pdbgym.evaluate.analysis import summarize
from pdbgym.evaluate.results import EpisodeRow
from pdbgym.fileio import write_json_atomic
from pdbgym.modelload import EMBEDDED, EMBEDDED_NAME, load_model
from pdbgym.policyname import is_server_url
from pdbgym.rollouts.cache import append_records
from pdbgym.rollouts.record import RolloutRecord, tokenizer_fingerprint
from pdbgym.seeds import episode_seed
from pdbgym.tasks.suites import resolve_tasks
from pdbgym.train.corpus.build import Example, refuse_held_out, write_corpus
from pdbgym.train.dagger.config import DaggerConfig
from pdbgym.train.report import write_training_report
from pdbgym.train.sft.config import SFTTrainConfig
from pdbgym.train.sft.trainer import StoreLineage, pick_device, train_sft

Event = Callable[[str], None]


class DaggerError(PdbgymError):
    """A DAgger run cannot start: a teacher that cannot label states, tokenizers that differ, held-out tasks."""


@dataclass
class Policy:
    """A model to roll out or label with: its backend (``generate``), tokenizer and display label."""

    backend: Any
    label: str

    @property
    def tokenizer(self) -> Any:
        return self.backend.tokenizer


@dataclass
class IterationRow:
    """One line of the iterations table (losses in nats per loss token; KL in nats per token)."""

    iteration: int
    adapter: str
    store_id: str
    student_episodes: int
    student_solved: int
    labels_new: int
    labels_total: int
    best_val_loss: float | None
    steps: int
    val_pass1: float | None = None
    val_pass1_ci: str | None = None
    kl_teacher_student: float | None = None
    transcripts: str = ""


@dataclass
class DaggerResult:
    out: Path
    rows: list[IterationRow] = field(default_factory=list)
    report: Path | None = None


def load_policy(ref: str, config: DaggerConfig, device: str, name: str | None = None) -> Policy:
    """A backend for ``ref``: an SGLang URL, or a model through the one model loader (``pdbgym.modelload``:
    ``embedded``, a model folder, a name or hash in the run's adapter store, its stack merged in memory)."""
    if ref == "scripted":
        raise DaggerError("the scripted policy replays the task's reference fix whatever state it is in, so it "
                          "cannot label the student's states; give --teacher a model ('embedded', a folder, an "
                          "adapter-store reference) or an SGLang server URL")
    if is_server_url(ref):
        return Policy(SGLangBackend.connect(ref, load_tokenizer(config.tokenizer)), ref)
    loaded = load_model(ref, device, lineage=StoreLineage(Store(config.store)))
    if ref == EMBEDDED:
        return Policy(HFBackend(loaded.model, loaded.tokenizer, EMBEDDED_NAME), EMBEDDED)
    if loaded.path is None:  # a store reference: its label names the artifact
        return Policy(HFBackend(loaded.model, loaded.tokenizer, name or ref), loaded.label)
    return Policy(HFBackend(loaded.model, loaded.tokenizer, name or loaded.path.name), loaded.path.name)


def turn_spans(record: RolloutRecord) -> list[tuple[int, int]]:
    """(start, end) ids of each assistant turn in ``record.tokens``: maximal runs of ``loss_mask == 1``."""
    spans, start = [], None
    for offset, bit in enumerate([*record.loss_mask, 0]):
        if bit and start is None:
            start = offset
        elif not bit and start is not None:
            spans.append((record.prompt_len + start, record.prompt_len + offset))
            start = None
    return spans


async def label_states(record: RolloutRecord, teacher: Policy, params: Any, iteration: int,
                       max_context: int) -> list[Example]:
    """The teacher's own next turn at every assistant turn's state of ``record`` (see the module doc)."""
    examples = []
    for turn_index, (start, _end) in enumerate(turn_spans(record)):
        state = record.tokens[:start]
        room = max_context - len(state)
        if room <= 0:
            break
        request = GenerationRequest(list(state), [], None, replace(params, max_new_tokens=min(params.max_new_tokens, room)))
        turn = await teacher.backend.generate(request)
        if not turn.token_ids:
            continue
        examples.append(Example(record.instance_id, f"dagger-iter{iteration}", record.sample_idx * 1000 + turn_index,
                                teacher.label, bool(record.reward_score >= 1.0), list(state) + list(turn.token_ids),
                                [0] * len(state) + [1] * len(turn.token_ids)))
    return examples


async def play(policy: Policy, tasks: list[Any], runs: int, config: DaggerConfig, seed: int,
               transcripts: Path) -> list[Any]:
    """Episodes of ``policy`` on ``tasks`` x ``runs``, transcripts written as ``TASK__RUN.json``."""
    fmt = detect_format(getattr(policy.tokenizer, "chat_template", None))
    env_config = EnvConfig(turn_budget=config.turn_budget)
    outcomes = []
    for task in tasks:
        for run in range(runs):
            params = SamplingParams(config.temperature, 1.0, config.max_new_tokens,
                                    episode_seed(seed, task.instance_id, run))
            agent = AgentConfig(tool_format=fmt, max_context_tokens=config.max_context_tokens, sampling=params,
                                dataset="dagger", sample_idx=run)
            outcome = await run_episode(task, ModelTurns(policy.backend, params), DebugEnv(task, env_config), agent)
            write_json_atomic(transcripts / f"{task.instance_id}__{run}.json", outcome.transcript)
            outcomes.append(outcome)
    return outcomes


def check_tokenizers(student: Policy, teacher: Policy) -> str:
    """The shared fingerprint; a teacher whose ids mean other tokens than the student's is refused."""
    ours, theirs = tokenizer_fingerprint(student.tokenizer), tokenizer_fingerprint(teacher.tokenizer)
    if ours != theirs:
        raise DaggerError(f"the teacher {teacher.label} tokenizes with fingerprint {theirs} but the student "
                          f"{student.label} with {ours}: the teacher's ids would be read as other tokens. "
                          "Use a teacher that shares the student's tokenizer")
    return ours


def val_pass1(policy: Policy, tasks: list[Any], config: DaggerConfig, transcripts: Path) -> tuple[float, str] | None:
    """pass@1 on ``tasks`` (``eval_runs`` each) with its task-clustered CI, via ``pdbgym.evaluate``."""
    if not tasks:
        return None
    outcomes = asyncio.run(play(policy, tasks, config.eval_runs, config, config.seed + 7, transcripts))
    rows = [EpisodeRow("student", o.record.instance_id, o.record.sample_idx, bool(o.record.reward_score >= 1.0),
                       o.record.termination_reason or "other", int(o.record.metadata.get("actions_used", 0)),
                       o.wall_seconds, str(transcripts)) for o in outcomes]
    summary = summarize(rows, ["student"], [t.instance_id for t in tasks], config.eval_runs)
    estimate = summary["arm_results"]["student"]["pass@1"]
    low, high = estimate["ci"]
    return float(estimate["mean"]), f"[{low:.3f}, {high:.3f}]"


def kl_to_cache(policy: Policy, cache: Path) -> float:
    """KL(teacher || student) in nats per teacher token on the teacher cache's own samples: the divergence
    library's ``kl_to_cache`` (its ``token_mean`` over the cache's scored tokens; k3, or k1, exact, for a
    deterministic teacher). The cache is checked before the model is touched."""
    target = open_teacher_cache(cache)  # a grammar-constrained or log-prob-less cache is refused here
    kl = kl_of_model(policy.backend.model, target, name=policy.label, tokenizer=policy.tokenizer)
    if kl.value is None:
        raise DaggerError(f"no finite KL term of {policy.label} on {cache} (share non-finite: "
                          f"{kl.nonfinite_share:.0%}); the model puts no probability on the cache's tokens")
    return kl.value


def _resolve_tasks(config: DaggerConfig) -> tuple[list[Any], list[Any]]:
    train = resolve_tasks(config.tasks)
    refuse_held_out([t.instance_id for t in train], config.splits, "DAgger training rollouts")
    val = resolve_tasks(config.val_tasks) if config.val_tasks else []
    overlap = sorted({t.instance_id for t in train} & {t.instance_id for t in val})
    if overlap:
        raise DaggerError(f"--val-tasks shares {len(overlap)} task(s) with --tasks ({', '.join(overlap[:5])}); "
                          "val tasks must be held out of training")
    return train, val


def _check_names_free(config: DaggerConfig, prefix: str) -> None:
    """Refuse before any episode when an iterate's store name is taken (a rerun into the same store)."""
    store = Store(config.store)
    taken = [f"{prefix}-iter{i}" for i in range(config.iterations) if f"{prefix}-iter{i}" in store.names()]
    if taken:
        raise DaggerError(f"the store at {store.root} already holds {', '.join(taken)}; pass --name-prefix or "
                          "another --store")


def train_dagger(config: DaggerConfig, on_event: Event | None = None) -> DaggerResult:
    """Run ``config.iterations`` DAgger iterations (module docstring); returns the iterations table."""
    say = on_event or (lambda text: None)
    out, device = Path(config.out), pick_device(config.device)
    prefix = config.name_prefix or out.name
    train_tasks, val_tasks = _resolve_tasks(config)
    _check_names_free(config, prefix)
    teacher = load_policy(config.teacher, config, device)
    student = load_policy(config.student, config, device)
    fingerprint = check_tokenizers(student, teacher)
    for policy in (student, teacher):  # the teacher labels the student's states in the same layout
        check_tool_turns(policy.tokenizer, detect_format(getattr(student.tokenizer, "chat_template", None)),
                         policy.label)
    labels: list[Example] = []
    result = DaggerResult(out)
    teacher_params = SamplingParams(config.teacher_temperature, 1.0, config.max_new_tokens, config.seed)
    for iteration in range(config.iterations):
        folder = out / f"iter{iteration}"
        say(f"iteration {iteration}: {student.label} plays {len(train_tasks)} task(s) x {config.runs}")
        outcomes = asyncio.run(play(student, train_tasks, config.runs, config, config.seed + 100 * iteration,
                                    folder / "transcripts"))
        append_records(folder / "rollouts", [o.record for o in outcomes])
        new = []
        for outcome in outcomes:
            new += asyncio.run(label_states(outcome.record, teacher, teacher_params, iteration,
                                            config.max_context_tokens))
        labels += new
        say(f"iteration {iteration}: teacher labelled {len(new)} state(s); {len(labels)} in the aggregate")
        write_corpus(folder / "corpus", labels, {"fingerprint": fingerprint, "name": teacher.label},
                     {"sources": {"dagger": str(out)}, "iteration": iteration})
        sft = SFTTrainConfig(**{"val_fraction": 0.0, **config.sft, "base": config.student, "data": folder / "corpus",
                                "out": folder / "sft", "name": f"{prefix}-iter{iteration}", "store": config.store,
                                "ledger": config.ledger, "seed": config.seed, "device": config.device})
        trained = train_sft(sft)
        student = load_policy(f"{prefix}-iter{iteration}", config, device)
        row = IterationRow(iteration, f"{prefix}-iter{iteration}", (trained.node_id or "")[:12], len(outcomes),
                           sum(o.record.reward_score >= 1.0 for o in outcomes), len(new), len(labels),
                           trained.best_val_loss, trained.steps, transcripts=str(folder / "transcripts"))
        scored = val_pass1(student, val_tasks, config, folder / "val_transcripts")
        if scored is not None:
            row.val_pass1, row.val_pass1_ci = scored
        if config.teacher_cache is not None:
            row.kl_teacher_student = kl_to_cache(student, config.teacher_cache)
        result.rows.append(row)
        write_json_atomic(out / "iterations.json", [asdict(r) for r in result.rows], indent=2)
        say(f"iteration {iteration}: adapter {row.adapter} ({row.store_id}); val pass@1 {row.val_pass1}")
    if config.report:
        result.report = _report(out, config, result, fingerprint)
    return result


def _report(out: Path, config: DaggerConfig, result: DaggerResult, fingerprint: str) -> Path:
    history = []
    for row in result.rows:
        metrics = out / f"iter{row.iteration}" / "sft" / "metrics.jsonl"
        for line in metrics.read_text().splitlines() if metrics.is_file() else []:
            entry = json.loads(line)
            history.append({"step": entry["step"], f"iter{row.iteration}_loss": entry.get("loss")}
                           if "loss" in entry else {})
    history = [h for h in history if h]
    summary = {"student": config.student, "teacher": config.teacher, "tasks": config.tasks,
               "val tasks": config.val_tasks, "iterations": len(result.rows), "tokenizer fingerprint": fingerprint,
               "parent of every iterate": config.student}
    return write_training_report(out, "pdbgym DAgger", history, summary,
                                 {"Iterations": [asdict(r) for r in result.rows]})
