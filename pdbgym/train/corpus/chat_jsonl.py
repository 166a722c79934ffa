"""Chat and SWE-bench-style trajectory JSONL -> token-exact SFT examples, loss on assistant turns.

Accepted line shapes (one JSON object a line):

- chat: ``{"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": str}, ...]}``
- SWE-bench-style: the same list under ``"messages"``, ``"history"`` or ``"trajectory"``, with the task
  under ``"instance_id"`` and the outcome under ``"resolved"`` (or ``"solved"``, or ``"reward"`` >= 1).

The conversation is rendered with the tokenizer's chat template segment by segment, the way pdbgym's own
episodes are built (``pdbgym.agent.trajectory``): the prompt up to the first assistant header, each
assistant turn (its content through the end-of-turn token, mask 1), and each stretch of template and
observation text between turns (mask 0), each tokenized on its own and concatenated. Messages after the
last assistant turn carry no loss and are left out. A template whose rendering of a longer conversation
does not extend the rendering of a shorter one (e.g. one that rewrites earlier turns) is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pdbgym.errors import PdbgymError
from pdbgym.fileio import JsonlError, JSONValue, read_jsonl
from pdbgym.train.corpus.example import Example

if TYPE_CHECKING:  # annotations only: transformers loads with a tokenizer
    from transformers import PreTrainedTokenizerBase

MESSAGE_KEYS = ("messages", "history", "trajectory")
ROLES = ("system", "user", "assistant", "tool")


class ChatFormatError(PdbgymError):
    """A JSONL trajectory line does not have an accepted shape, or its template cannot be segmented."""


def _messages_of(row: dict[str, JSONValue], where: str) -> list[dict[str, str]]:
    key = next((k for k in MESSAGE_KEYS if k in row), None)
    if key is None or not isinstance(row[key], list):
        raise ChatFormatError(f"{where}: no message list under any of {MESSAGE_KEYS}")
    messages = []
    for index, message in enumerate(row[key]):
        if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(message.get("content"), str):
            raise ChatFormatError(f"{where}: {key}[{index}] needs a role in {ROLES} and a string content")
        messages.append({"role": message["role"], "content": message["content"]})
    if not any(m["role"] == "assistant" for m in messages):
        raise ChatFormatError(f"{where}: holds no assistant turn, so there is nothing to learn")
    return messages


def _solved(row: dict[str, JSONValue]) -> bool:
    for key in ("resolved", "solved"):
        if key in row:
            return bool(row[key])
    reward = row.get("reward")
    return isinstance(reward, int | float) and reward >= 1.0


def _stop_text(tokenizer: PreTrainedTokenizerBase) -> str | None:
    vocab = tokenizer.get_vocab()
    return "<|im_end|>" if "<|im_end|>" in vocab else tokenizer.eos_token


def tokenize_conversation(messages: list[dict[str, str]], tokenizer: PreTrainedTokenizerBase, where: str = "conversation"
                          ) -> tuple[list[int], list[int]]:
    """(input_ids, assistant_masks) of a conversation, segment by segment (see the module docstring)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ChatFormatError(f"tokenizer {getattr(tokenizer, 'name_or_path', '?')} has no chat template")

    def render(part: list[dict[str, str]], generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(part, tokenize=False, add_generation_prompt=generation_prompt)

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    ids: list[int] = []
    mask: list[int] = []
    done = ""  # text already turned into ids
    stop = _stop_text(tokenizer)
    last_assistant = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    for index in range(last_assistant + 1):
        if messages[index]["role"] != "assistant":
            continue
        before = render(messages[:index], True)
        after = render(messages[: index + 1], False)
        if not before.startswith(done) or not after.startswith(before):
            raise ChatFormatError(f"{where}: the chat template's rendering of turn {index} does not extend the "
                                  "rendering before it; this template cannot be segmented token-exactly")
        turn = after[len(before):]
        # The model generates through its end-of-turn token; what the template adds after it is not its own.
        cut = turn.rfind(stop) + len(stop) if stop and stop in turn else len(turn)
        context = encode(before[len(done):])
        generated = encode(turn[:cut])
        ids += context + generated
        mask += [0] * len(context) + [1] * len(generated)
        done = before + turn[:cut]
    return ids, mask


def read_chat_jsonl(path: Path, tokenizer: PreTrainedTokenizerBase) -> list[Example]:
    """Examples (``pdbgym.train.corpus.build.Example``) from one JSONL file; errors name the file and line."""
    examples: list[Example] = []
    try:
        found = read_jsonl(path, strict=True)
    except JsonlError as exc:
        raise ChatFormatError(str(exc)) from exc
    for number, row in zip(found.numbers, found.rows, strict=True):
        where = f"{path}:{number}"
        messages = _messages_of(row, where)
        ids, mask = tokenize_conversation(messages, tokenizer, where)
        instance_id = str(row.get("instance_id") or f"{Path(path).stem}:{number}")
        examples.append(Example(instance_id, str(row.get("dataset") or Path(path).stem), int(row.get("sample_idx", 0)),
                                str(path), _solved(row), ids, mask))
    return examples
