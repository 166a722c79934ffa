"""What a DAgger run refuses before any episode: training tasks held out by the splits or shared with
the val tasks, iterate names the store already holds, and a teacher that cannot label the student's
states (ids that mean other tokens, or a chat template that cannot lay out the student's tool turns).

The teacher must be able to answer an arbitrary state: a model (``embedded``, a folder, a store
reference) or an SGLang server URL (``/generate`` takes ids, so the state is conditioned on exactly).
The scripted policy cannot: it replays the task's reference fix whatever state it is in. An
OpenAI-chat server re-renders messages, so its turn is not conditioned on the student's exact ids."""

from __future__ import annotations

from pdbgym.adapters.store import Store
from pdbgym.agent.loop import check_tool_turns
from pdbgym.agent.toolcalls import detect_format
from pdbgym.rollouts.record import tokenizer_fingerprint
from pdbgym.tasks.model import Task
from pdbgym.tasks.suites import resolve_tasks
from pdbgym.train.corpus.build import refuse_held_out
from pdbgym.train.dagger.config import DaggerConfig
from pdbgym.train.dagger.policy import Policy
from pdbgym.train.errors import DaggerError


def load_tasks(config: DaggerConfig) -> tuple[list[Task], list[Task]]:
    """(train tasks, val tasks): none of the train tasks held out, none shared with val."""
    train = resolve_tasks(config.tasks)
    refuse_held_out([t.instance_id for t in train], config.splits, "DAgger training rollouts")
    val = resolve_tasks(config.val_tasks) if config.val_tasks else []
    overlap = sorted({t.instance_id for t in train} & {t.instance_id for t in val})
    if overlap:
        raise DaggerError(f"--val-tasks shares {len(overlap)} task(s) with --tasks ({', '.join(overlap[:5])}); "
                          "val tasks must be held out of training")
    return train, val


def check_names_free(config: DaggerConfig, prefix: str) -> None:
    """Refuse before any episode when an iterate's store name is taken (a rerun into the same store)."""
    store = Store(config.store)
    taken = [f"{prefix}-iter{i}" for i in range(config.iterations) if f"{prefix}-iter{i}" in store.names()]
    if taken:
        raise DaggerError(f"the store at {store.root} already holds {', '.join(taken)}; pass --name-prefix or "
                          "another --store")


def check_tokenizers(student: Policy, teacher: Policy) -> str:
    """The shared fingerprint; a teacher whose ids mean other tokens than the student's is refused."""
    ours, theirs = tokenizer_fingerprint(student.tokenizer), tokenizer_fingerprint(teacher.tokenizer)
    if ours != theirs:
        raise DaggerError(f"the teacher {teacher.label} tokenizes with fingerprint {theirs} but the student "
                          f"{student.label} with {ours}: the teacher's ids would be read as other tokens. "
                          "Use a teacher that shares the student's tokenizer")
    return ours


def check_teacher(student: Policy, teacher: Policy) -> str:
    """The shared tokenizer fingerprint, once both chat templates can lay out the student's tool turns."""
    fingerprint = check_tokenizers(student, teacher)
    for policy in (student, teacher):  # the teacher labels the student's states in the same layout
        check_tool_turns(policy.tokenizer, detect_format(getattr(student.tokenizer, "chat_template", None)),
                         policy.label)
    return fingerprint
