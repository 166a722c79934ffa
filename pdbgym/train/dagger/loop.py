"""``pdbgym train dagger``: online DAgger through pdbgym's episode loop and the SFT trainer.

Each iteration i:

1. the current student (the given model for i = 0, else adapter ``iter{i-1}`` stacked on its lineage)
   plays ``runs`` episodes per training task (``pdbgym.agent.loop.run_episode``, real pdb sessions),
   kept as a rollout cache (``iter{i}/rollouts``) with transcripts;
2. every assistant turn of those episodes is a state: the ids before it (the student's own history,
   exactly as its record holds them). The teacher, given those ids, samples its own next turn; the
   pair (state ids with mask 0, teacher ids with mask 1) is one labelled example, token-exact
   (``dagger.labels``);
3. labels of all iterations so far are aggregated (deduplicated by content) into a corpus;
4. adapter ``iter{i}`` is trained on it by SFT from the same parent as iteration 0 (the student's own
   weights), and registered in the store under ``{prefix}-iter{i}``;
5. the iterate is evaluated: pass@1 on the val tasks (episodes, ``pdbgym.evaluate`` statistics) and,
   given a teacher cache, KL(teacher || student) per token on it (``dagger.scores``).

Before any episode, ``dagger.checks`` refuses what the run cannot do: held-out or shared tasks, taken
iterate names, and a teacher that cannot label the student's states (it must be a model or an SGLang
server URL, sharing the student's tokenizer). Student and teacher are loaded by ``dagger.policy``, play
by ``dagger.play``; the iterations table and report are ``dagger.report``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pdbgym.modelload import pick_device
from pdbgym.train.dagger.checks import check_names_free, check_teacher, load_tasks
from pdbgym.train.dagger.config import DaggerConfig
from pdbgym.train.dagger.labels import label_episodes, write_labels
from pdbgym.train.dagger.play import play_iteration
from pdbgym.train.dagger.policy import load_policy
from pdbgym.train.dagger.report import DaggerResult, IterationRow, write_iterations, write_report
from pdbgym.train.dagger.scores import kl_to_cache, val_pass1
from pdbgym.train.sft.config import SFTTrainConfig
from pdbgym.train.sft.trainer import train_sft

Event = Callable[[str], None]


def train_dagger(config: DaggerConfig, on_event: Event | None = None) -> DaggerResult:
    """Run ``config.iterations`` DAgger iterations (module docstring); returns the iterations table."""
    say = on_event or (lambda text: None)
    out, device = Path(config.out), pick_device(config.device)
    prefix = config.name_prefix or out.name
    train_tasks, val_tasks = load_tasks(config)
    check_names_free(config, prefix)
    teacher = load_policy(config.teacher, config, device)
    student = load_policy(config.student, config, device)
    fingerprint = check_teacher(student, teacher)
    labels: list = []  # the aggregate: each distinct (state, label) once, in the order first labelled
    seen: set[str] = set()
    result = DaggerResult(out)
    for iteration in range(config.iterations):
        folder = out / f"iter{iteration}"
        say(f"iteration {iteration}: {student.label} plays {len(train_tasks)} task(s) x {config.runs}")
        outcomes = play_iteration(student, train_tasks, config, iteration, folder)
        new = label_episodes(outcomes, teacher, config, iteration)
        fresh = [example for example in new if example.content_hash not in seen]
        seen.update(example.content_hash for example in fresh)
        labels += list({example.content_hash: example for example in fresh}.values())
        say(f"iteration {iteration}: teacher labelled {len(new)} state(s); {len(labels)} distinct in the aggregate")
        write_labels(folder, labels, fingerprint, teacher, out, iteration)
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
        write_iterations(out, result.rows)
        say(f"iteration {iteration}: adapter {row.adapter} ({row.store_id}); val pass@1 {row.val_pass1}")
    if config.report:
        result.report = write_report(out, config, result, fingerprint)
    return result
