"""Grammar-constrained tool calls: a grammar from the tool JSON schemas, enforced token by token by xgrammar.

A constrained turn is exactly one tool call in the policy's tool-call format (no text before or after
it), then an end-of-turn token. The grammar is generated here from ``pdbgym.env.tools.TOOL_SCHEMAS``
(tool names, argument names, types, enums, which are required) and the wrapper text
``pdbgym.agent.toolcalls`` parses; xgrammar compiles it against the model's vocabulary and masks every
token that would leave it. Every string the grammar admits therefore parses with ``parse_tool_call``
and passes ``check_args``.

Strings are printable ASCII plus the escapes ``\\n \\t \\" \\\\`` (JSON formats) or raw newlines and
tabs (``qwen3_xml``), and never hold the text that would end the call early (a backtick in ``text``,
``</`` in ``hermes``, ``</`` or ``<p`` in ``qwen3_xml``); integers have at most 7 digits.

Strings are unbounded in the grammar (a bounded repetition of escapes makes xgrammar's per-token mask
hundreds of times slower), so the turn's token budget ``max_new_tokens`` is kept another way: when
the ids left fall to ``close_reserve(fmt)``, the shortest string that completes the call is found by
trying candidate endings on a fork of the grammar state (each tool's minimal call's suffixes, after
closing an open string, escape or integer), and its tokens are the only ones allowed from then on.
A token is at least one character, so the forced ending plus the end-of-turn id always fit.

The log-probs of a constrained turn are those of the masked distribution (renormalized over the
tokens the grammar allows), not the model's own; records say so (``LogprobSemantics.constrained``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pdbgym.agent.backends.base import BackendError
from pdbgym.agent.toolcalls import FORMATS, render_tool_call
from pdbgym.env.tools import TOOL_SCHEMAS, Action
from pdbgym.versions import require

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedTokenizerBase

INT_DIGITS = 7
_PRINTABLE = [chr(c) for c in range(0x20, 0x7F)]
_OPENERS = ("", '"', 'n"', "1", "x", 'x"')  # what closes an open string, escape, integer or "<"


class ConstrainedError(BackendError):
    """Constrained decoding cannot be set up (library missing, budget too small, unknown format)."""


def _lit(text: str) -> str:
    """An EBNF string literal for ``text``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def _char_class(chars: list[str]) -> str:
    """An EBNF character class holding exactly ``chars`` (single characters)."""
    special = {"\\": "\\\\", "]": "\\]", "[": "\\[", "-": "\\-", "^": "\\^", "\n": "\\n", "\t": "\\t"}
    return "[" + "".join(special.get(c, c) for c in sorted(set(chars))) + "]"


def _string_rules(fmt: str) -> dict[str, str]:
    """Rules ``unit`` (one string unit) for format ``fmt``; see the module docstring for what is excluded."""
    if fmt == "qwen3_xml":
        raw = [c for c in _PRINTABLE if c != "<"] + ["\n", "\t"]
        after_lt = [c for c in raw if c not in "/p"]
        return {"unit": f'{_char_class(raw)} | "<" {_char_class(after_lt)}'}
    forbidden = {"text": '"\\`', "hermes": '"\\<'}[fmt]
    raw = [c for c in _PRINTABLE if c not in forbidden]
    escape = '"\\\\" [nt\\"\\\\]'
    if fmt == "text":
        return {"unit": f"{_char_class(raw)} | {escape}"}
    after_lt = [c for c in raw if c != "/"]
    # Flat alternatives: a nested group after "<" makes xgrammar's per-token mask ~70 ms instead of ~0.05.
    return {"unit": f'{_char_class(raw)} | {escape} | "<" {_char_class(after_lt)} | "<" {escape}'}


def minimal_call(tool: str, fmt: str) -> str:
    """``tool``'s shortest call: its required arguments only, strings empty, integers 0."""
    params = TOOL_SCHEMAS[tool]["parameters"]
    args = {name: 0 if params["properties"][name]["type"] == "integer" else "" for name in params["required"]}
    return render_tool_call(Action(tool, args), fmt)


def _ending_calls(tool: str, fmt: str) -> list[str]:
    """Calls whose suffixes end any call in progress: the minimal one, and it plus each optional
    argument (an empty string, 0, or each enum value) for a call stopped inside that argument."""
    params = TOOL_SCHEMAS[tool]["parameters"]
    base = {name: 0 if params["properties"][name]["type"] == "integer" else "" for name in params["required"]}
    calls = [render_tool_call(Action(tool, base), fmt)]
    for name, prop in params["properties"].items():
        if name in params["required"]:
            continue
        values = prop.get("enum") or [0 if prop["type"] == "integer" else ""]
        calls.extend(render_tool_call(Action(tool, {**base, name: value}), fmt) for value in values)
    return calls


def closing_candidates(fmt: str) -> list[str]:
    """Candidate endings of a call in progress, shortest first: an opener that closes an open string,
    escape, integer or ``<``, then a suffix of one of ``_ending_calls``."""
    suffixes = {call[i:] for tool in TOOL_SCHEMAS for call in _ending_calls(tool, fmt) for i in range(len(call) + 1)}
    return sorted({opener + suffix for opener in _OPENERS for suffix in suffixes}, key=lambda c: (len(c), c))


def close_reserve(fmt: str) -> int:
    """Ids kept for the forced ending: the longest candidate (a token is >= 1 character) + end-of-turn."""
    return max(len(c) for c in closing_candidates(fmt)) + 1


def _value_rule(prop: dict[str, Any], fmt: str) -> str:
    if prop["type"] == "integer":
        return f'("0" | "-"? [1-9] [0-9]{{0,{INT_DIGITS - 1}}})'
    if "enum" in prop:
        return "(" + " | ".join(_lit(v if fmt == "qwen3_xml" else f'"{v}"') for v in prop["enum"]) + ")"
    if fmt == "qwen3_xml":
        return "unit*"
    return '("\\"" unit* "\\"")'


def _arg_items(tool: str, fmt: str) -> list[tuple[str, bool]]:
    """``(EBNF of one argument, required)`` in the order required-first, then schema order."""
    params = TOOL_SCHEMAS[tool]["parameters"]
    items = []
    for name, prop in params["properties"].items():
        value = _value_rule(prop, fmt)
        if fmt == "qwen3_xml":
            item = f'{_lit(f"<parameter={name}>" + chr(10))} {value} {_lit(chr(10) + "</parameter>" + chr(10))}'
        else:
            item = f"{_lit(json.dumps(name) + ': ')} {value}"
        items.append((item, name in params["required"]))
    return sorted(items, key=lambda pair: not pair[1])


def _args_rule(tool: str, fmt: str) -> str:
    """EBNF for the arguments: required ones in order, each optional one present or not (JSON commas)."""
    items = _arg_items(tool, fmt)
    sep = "" if fmt == "qwen3_xml" else '", " '
    required = [item for item, req in items if req]
    optional = [item for item, req in items if not req]
    if required:
        head = f" {sep}".join(required) if sep else " ".join(required)
        return " ".join([head, *(f"({sep}{item})?" for item in optional)]) or '""'
    if not optional:
        return '""'
    # No required argument: the first present optional one carries no leading comma.
    choices = ['""']
    for i, item in enumerate(optional):
        choices.append(" ".join([item, *(f"({sep}{rest})?" for rest in optional[i + 1:])]))
    return "(" + " | ".join(choices) + ")"


def _call_rule(tool: str, fmt: str) -> str:
    args = _args_rule(tool, fmt)
    if fmt == "qwen3_xml":
        return f'{_lit(f"<tool_call>{chr(10)}<function={tool}>{chr(10)}")} {args} {_lit(f"</function>{chr(10)}</tool_call>")}'
    key, args_key = ("tool", "args") if fmt == "text" else ("name", "arguments")
    open_json = f'{{"{key}": "{tool}", "{args_key}": {{'
    body = f"{_lit(open_json)} {args} {_lit('}}')}"
    if fmt == "text":
        return f'{_lit("```tool" + chr(10))} {body} {_lit(chr(10) + "```")}'
    return f'{_lit("<tool_call>" + chr(10))} {body} {_lit(chr(10) + "</tool_call>")}'


def min_budget(fmt: str) -> int:
    """The smallest ``max_new_tokens`` a constrained turn accepts: the forced-ending reserve plus room
    for the longest tool's minimal call with a few characters of argument."""
    longest = max(len(minimal_call(tool, fmt)) for tool in TOOL_SCHEMAS)
    return close_reserve(fmt) + longest + 16


def tool_call_grammar(fmt: str, max_new_tokens: int) -> str:
    """The EBNF (xgrammar dialect) of one tool call of format ``fmt``; ``max_new_tokens`` is checked
    against ``min_budget`` (the grammar itself does not depend on it)."""
    if fmt not in FORMATS:
        raise ConstrainedError(f"unknown tool-call format {fmt!r}; choose one of {FORMATS}")
    needed = min_budget(fmt)
    if max_new_tokens < needed:
        raise ConstrainedError(f"constrained tool calls in format {fmt!r} need --max-new-tokens >= {needed} "
                               f"(got {max_new_tokens}): the longest call must fit one turn")
    rules = [f"root ::= {' | '.join(f'call_{t}' for t in TOOL_SCHEMAS)}"]
    for tool in TOOL_SCHEMAS:
        rules.append(f"call_{tool} ::= {_call_rule(tool, fmt)}")
    rules.extend(f"{name} ::= {body}" for name, body in _string_rules(fmt).items())
    return "\n".join(rules) + "\n"


@dataclass
class ToolCallConstraint:
    """A compiled tool-call grammar for one tokenizer and format; ``TurnMask(constraint)`` starts a turn."""

    compiled: Any
    tokenizer: PreTrainedTokenizerBase
    vocab_size: int
    fmt: str
    digest: str
    candidates: list[str]

    @property
    def label(self) -> str:
        """What records carry in ``logprob_semantics['grammar']``."""
        return f"xgrammar:{self.fmt}:{self.digest}"


_COMPILERS: dict[int, tuple[Any, Any]] = {}
_CONSTRAINTS: dict[tuple[int, str], ToolCallConstraint] = {}


def compile_constraint(tokenizer: PreTrainedTokenizerBase, vocab_size: int, stops: set[int], fmt: str,
                       max_new_tokens: int) -> ToolCallConstraint:
    """The tool-call grammar compiled for ``tokenizer`` (logits of ``vocab_size`` entries); cached.

    ``stops`` are the end-of-turn ids: the only ones allowed once the call is complete.
    ``max_new_tokens`` below ``min_budget(fmt)`` is refused (``ConstrainedError``).
    """
    require("xgrammar")
    try:
        import xgrammar as xgr  # optional: xgrammar (pdbgym[constrained])
    except ImportError as exc:
        raise ConstrainedError("constrained tool calls need xgrammar: pip install 'pdbgym[constrained]'") from exc
    ebnf = tool_call_grammar(fmt, max_new_tokens)
    key = (id(tokenizer), fmt)
    if key not in _CONSTRAINTS:
        if id(tokenizer) not in _COMPILERS:
            info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                                      stop_token_ids=sorted(stops))
            _COMPILERS[id(tokenizer)] = (tokenizer, xgr.GrammarCompiler(info, max_threads=1))
        compiled = _COMPILERS[id(tokenizer)][1].compile_grammar(xgr.Grammar.from_ebnf(ebnf))
        digest = hashlib.sha256(ebnf.encode()).hexdigest()[:12]
        _CONSTRAINTS[key] = ToolCallConstraint(compiled, tokenizer, vocab_size, fmt, digest, closing_candidates(fmt))
    return _CONSTRAINTS[key]


class TurnMask:
    """One turn's grammar state: ``apply(logits, left)`` masks disallowed ids, ``accept(id)`` advances.

    ``left`` is the number of ids the turn may still sample (this one included); from
    ``close_reserve`` on, only the ids of the shortest ending of the call are allowed.
    """

    def __init__(self, constraint: ToolCallConstraint) -> None:
        import xgrammar as xgr  # optional: xgrammar (pdbgym[constrained])

        self.constraint = constraint
        self.matcher = xgr.GrammarMatcher(constraint.compiled)
        self.bitmask = xgr.allocate_token_bitmask(1, constraint.vocab_size)
        self.reserve = close_reserve(constraint.fmt)
        self.forced: list[int] | None = None

    def apply(self, logits: Any, left: int | None = None) -> Any:
        """``logits`` ([V] float32, CPU) with every id forbidden here set to -inf (in place)."""
        import torch  # optional: torch (pdbgym[hf])
        import xgrammar as xgr  # optional: xgrammar (pdbgym[constrained])

        if self.forced is None and left is not None and left <= self.reserve and not self.matcher.is_completed():
            self.forced = self._ending_ids(left)
        if self.forced:
            keep = logits[self.forced[0]].clone()
            logits.fill_(-torch.inf)
            logits[self.forced[0]] = keep
            return logits
        self.matcher.fill_next_token_bitmask(self.bitmask)
        xgr.apply_token_bitmask_inplace(logits, self.bitmask[0])
        return logits

    def accept(self, token: int) -> None:
        if not self.matcher.accept_token(token):
            raise ConstrainedError(f"token {token} was sampled outside the tool-call grammar")
        if self.forced:
            self.forced.pop(0)

    def _ending_ids(self, left: int) -> list[int]:
        """Ids of the shortest candidate ending the grammar accepts from here (each checked on a fork)
        that leaves room for the end-of-turn id within ``left``."""
        tokenizer = self.constraint.tokenizer
        for ending in self.constraint.candidates:
            if not ending:
                continue
            for ids in (tokenizer.encode(ending, add_special_tokens=False),
                        [i for ch in ending for i in tokenizer.encode(ch, add_special_tokens=False)]):
                fork = self.matcher.fork()
                if len(ids) < left and all(fork.accept_token(i) for i in ids) and fork.is_completed():
                    return list(ids)
        raise ConstrainedError("no ending of the tool call fits the grammar state; please report this")


def constrain(backend: Any, fmt: str, max_new_tokens: int) -> None:
    """Make ``backend`` (an in-process ``HFBackend``) write only grammar-valid tool calls of format ``fmt``.

    The grammar is compiled here, so a budget too small or a missing library fails before any episode.
    """
    if not hasattr(backend, "constrained_format"):
        raise ConstrainedError(f"{backend.name}: constrained tool calls need an in-process model "
                               "('embedded' or a model folder)")
    backend.constrained_format = fmt
    compile_constraint(backend.tokenizer, backend.model.get_output_embeddings().weight.shape[0], backend.stops,
                       fmt, max_new_tokens)
