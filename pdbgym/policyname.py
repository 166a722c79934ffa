"""What a policy string names (``--policy``, ``--arm NAME=MODEL``, ``--teacher``, ``--student``): one parser.

``scripted`` and ``human`` are action policies (they write tool calls, no model samples them);
``embedded`` is the packaged SmolLM2-135M-Instruct; ``http://`` or ``https://`` is a model server;
anything else is a local model folder (or file). Which of these a command accepts is the command's
business; this module only classifies, so every command classifies the same way.
"""

from __future__ import annotations

from typing import Literal

PolicyKind = Literal["scripted", "human", "embedded", "url", "path"]

ACTION_POLICIES: tuple[str, ...] = ("scripted", "human")
"""Policies that act without a model; their turns carry no sampled log-probs."""

INTERACTIVE_POLICIES: tuple[str, ...] = ("human",)
"""Policies that read a terminal: only ``pdbgym run`` plays them, never a campaign or a cache build."""

POLICY_CHOICES = "'scripted', 'human', 'embedded', an http(s):// server URL, or an existing model folder"


def is_server_url(text: str) -> bool:
    """Whether ``text`` names a model server (an ``http://`` or ``https://`` URL)."""
    return text.startswith(("http://", "https://"))


CONSTRAINED_PREFIX = "constrained:"
"""``constrained:MODEL``: the local model ``MODEL`` with grammar-constrained tool calls (``pdbgym.agent.constrained``)."""


def split_constrained(text: str) -> tuple[str, bool]:
    """``(the policy string without the constrained: prefix, whether it had one)``."""
    if text.startswith(CONSTRAINED_PREFIX):
        return text[len(CONSTRAINED_PREFIX):], True
    return text, False


def policy_kind(text: str) -> PolicyKind:
    """The kind of policy ``text`` names (a ``constrained:`` prefix aside); a path is not checked here."""
    text, _ = split_constrained(text)
    if text in ACTION_POLICIES or text == "embedded":
        return text  # type: ignore[return-value]
    return "url" if is_server_url(text) else "path"


def runs_in_process(kind: PolicyKind) -> bool:
    """Local models keep one copy (and one KV cache) per process, so their episodes take turns in it."""
    return kind in ("embedded", "path")

