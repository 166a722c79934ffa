"""The context check before the first episode: does an episode's first prompt leave room for a turn?

An episode's trajectory starts with the system prompt, the tool schemas and the first observation (the
task statement, its failing tests, then the pdb session's first output), rendered by the policy's chat
template; every turn must fit in ``max_context_tokens`` beside it (``loop._play``: a turn gets only the
room left, none left ends the episode as ``ctx_overflow``). All but pdb's output is known before any
session starts, so a context cap that cannot hold that part plus one full turn fails every episode; it
is refused once, before the first, naming the numbers and the flags to change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pdbgym.agent.loop import episode_template, first_messages
from pdbgym.env.environment import initial_observation
from pdbgym.errors import PdbgymError
from pdbgym.tasks.model import Task

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedTokenizerBase


def first_prompt_tokens(tokenizer: PreTrainedTokenizerBase, tool_format: str, task: Task) -> int:
    """Tokens of ``task``'s first prompt before pdb's output: system prompt, tools, statement, failing tests,
    rendered with the generation prompt as the episode's first request is."""
    template = episode_template(tokenizer, tool_format)
    messages = first_messages(tool_format, initial_observation(task, ""))
    return len(template.encode(template.render(messages, add_generation_prompt=True)))


def check_context_room(tokenizer: PreTrainedTokenizerBase, tool_format: str, tasks: Sequence[Task], max_context_tokens: int,
                       max_new_tokens: int, label: str) -> None:
    """Refuse (``PdbgymError``) a ``max_context_tokens`` below the longest first prompt of ``tasks`` plus one
    turn of ``max_new_tokens`` (0 for a policy that writes its turns instead of sampling them: a turn
    then needs only room to start). ``label`` names the policy in the message."""
    if not tasks:
        return
    longest, instance_id = max((first_prompt_tokens(tokenizer, tool_format, task), task.instance_id)
                               for task in tasks)
    needed = longest + max(max_new_tokens, 1)
    if needed <= max_context_tokens:
        return
    where = (f"the first prompt of task {instance_id} (system prompt, tools and task statement with {label}'s "
             f"tokenizer and chat template, before pdb's first output) is already {longest} tokens")
    if longest >= max_context_tokens or not max_new_tokens:
        raise PdbgymError(f"--max-context-tokens {max_context_tokens} leaves no room for even one turn: {where}; "
                          f"raise --max-context-tokens above {longest} (and leave room for pdb's output and the "
                          "turns after)")
    raise PdbgymError(f"--max-context-tokens {max_context_tokens} cannot hold one full turn: {where}, and a turn "
                      f"may sample up to {max_new_tokens} more (--max-new-tokens); raise --max-context-tokens to "
                      f"at least {needed} (more for pdb's output and the turns after), or lower --max-new-tokens "
                      f"to {max_context_tokens - longest} or less")
