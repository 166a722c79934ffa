"""Grammar-constrained tool calls: a grammar from the tool JSON schemas, enforced token by token by xgrammar.

A constrained turn is exactly one tool call in the policy's tool-call format (no text before or after
it), then an end-of-turn token. The grammar is generated here from ``pdbgym.env.tools.TOOL_SCHEMAS``
(tool names, argument names, types, enums, which are required) and the wrapper text
``pdbgym.agent.toolcalls`` parses; xgrammar compiles it against the model's vocabulary and masks every
token that would leave it. Every string the grammar admits therefore parses with ``parse_tool_call``
and passes ``check_args``.

Three bounds make that hold within the turn's token budget ``max_new_tokens`` (B):

* integers are at most 7 digits with an optional sign;
* strings are printable ASCII plus the escapes ``\\n \\t \\" \\\\`` (JSON formats) or raw newlines and
  tabs (``qwen3_xml``), never holding the text that would end the call early (a backtick in ``text``,
  ``</`` in ``hermes``, ``</`` or ``<p`` in ``qwen3_xml``);
* every string of a tool is at most ``L`` units long, where a unit is at most ``UNIT_CHARS[fmt]``
  characters and ``L = (B - 1 - skeleton) // (UNIT_CHARS[fmt] * n_strings)``; ``skeleton`` is the
  length of the call with empty strings and 8-character integers. A token is at least one character,
  so the longest call plus the end-of-turn token fits in B tokens.

The log-probs of a constrained turn are those of the masked distribution (renormalized over the
tokens the grammar allows), not the model's own; records say so (``LogprobSemantics.constrained``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from pdbgym.agent.backends.base import BackendError
from pdbgym.agent.toolcalls import FORMATS, render_tool_call
from pdbgym.env.tools import TOOL_SCHEMAS, Action

UNIT_CHARS = {"text": 2, "hermes": 3, "qwen3_xml": 2}  # longest unit of a string, in characters
INT_DIGITS = 7
MIN_STRING_UNITS = 8  # below this a budget is refused rather than offering useless 3-character paths
_PRINTABLE = [chr(c) for c in range(0x20, 0x7F)]


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
    return {"unit": f'{_char_class(raw)} | {escape} | "<" ({_char_class(after_lt)} | {escape})'}


def _sample_args(props: dict[str, Any]) -> dict[str, Any]:
    """Arguments of maximal non-string length: every property, empty strings, 8-character integers."""
    return {name: -(10 ** INT_DIGITS - 1) if p["type"] == "integer" else "" for name, p in props.items()}


def string_units(tool: str, fmt: str, max_new_tokens: int) -> int | None:
    """The per-string cap L (units) of ``tool`` under budget ``max_new_tokens``; None when it has no strings."""
    props = TOOL_SCHEMAS[tool]["parameters"]["properties"]
    n_strings = sum(p["type"] == "string" and "enum" not in p for p in props.values())
    if n_strings == 0:
        return None
    skeleton = len(render_tool_call(Action(tool, _sample_args(props)), fmt))
    return (max_new_tokens - 1 - skeleton) // (UNIT_CHARS[fmt] * n_strings)


def _value_rule(tool: str, name: str, prop: dict[str, Any], fmt: str, units: int | None) -> str:
    if prop["type"] == "integer":
        return f'("0" | "-"? [1-9] [0-9]{{0,{INT_DIGITS - 1}}})'
    if "enum" in prop:
        return "(" + " | ".join(_lit(v if fmt == "qwen3_xml" else f'"{v}"') for v in prop["enum"]) + ")"
    if fmt == "qwen3_xml":
        return f"unit{{0,{units}}}"
    return f'("\\"" unit{{0,{units}}} "\\"")'


def _arg_items(tool: str, fmt: str, units: int | None) -> list[tuple[str, bool]]:
    """``(EBNF of one argument, required)`` in the order required-first, then schema order."""
    params = TOOL_SCHEMAS[tool]["parameters"]
    items = []
    for name, prop in params["properties"].items():
        value = _value_rule(tool, name, prop, fmt, units)
        if fmt == "qwen3_xml":
            item = f'{_lit(f"<parameter={name}>" + chr(10))} {value} {_lit(chr(10) + "</parameter>" + chr(10))}'
        else:
            item = f"{_lit(json.dumps(name) + ': ')} {value}"
        items.append((item, name in params["required"]))
    return sorted(items, key=lambda pair: not pair[1])


def _args_rule(tool: str, fmt: str, units: int | None) -> str:
    """EBNF for the arguments: required ones in order, each optional one present or not (JSON commas)."""
    items = _arg_items(tool, fmt, units)
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


def _call_rule(tool: str, fmt: str, units: int | None) -> str:
    args = _args_rule(tool, fmt, units)
    if fmt == "qwen3_xml":
        return f'{_lit(f"<tool_call>{chr(10)}<function={tool}>{chr(10)}")} {args} {_lit(f"</function>{chr(10)}</tool_call>")}'
    key, args_key = ("tool", "args") if fmt == "text" else ("name", "arguments")
    open_json = f'{{"{key}": "{tool}", "{args_key}": {{'
    body = f"{_lit(open_json)} {args} {_lit('}}')}"
    if fmt == "text":
        return f'{_lit("```tool" + chr(10))} {body} {_lit(chr(10) + "```")}'
    return f'{_lit("<tool_call>" + chr(10))} {body} {_lit(chr(10) + "</tool_call>")}'


def min_budget(fmt: str) -> int:
    """The smallest ``max_new_tokens`` under which every tool's strings get ``MIN_STRING_UNITS`` units."""
    budget = 1
    for tool, schema in TOOL_SCHEMAS.items():
        props = schema["parameters"]["properties"]
        n_strings = sum(p["type"] == "string" and "enum" not in p for p in props.values())
        skeleton = len(render_tool_call(Action(tool, _sample_args(props)), fmt))
        budget = max(budget, skeleton + 1 + UNIT_CHARS[fmt] * n_strings * MIN_STRING_UNITS)
    return budget


def tool_call_grammar(fmt: str, max_new_tokens: int) -> str:
    """The EBNF (xgrammar dialect) of one tool call of format ``fmt`` that fits ``max_new_tokens`` tokens."""
    if fmt not in FORMATS:
        raise ConstrainedError(f"unknown tool-call format {fmt!r}; choose one of {FORMATS}")
    needed = min_budget(fmt)
    if max_new_tokens < needed:
        raise ConstrainedError(f"constrained tool calls in format {fmt!r} need --max-new-tokens >= {needed} "
                               f"(got {max_new_tokens}): the longest call must fit one turn")
    rules = [f"root ::= {' | '.join(f'call_{t}' for t in TOOL_SCHEMAS)}"]
    for tool in TOOL_SCHEMAS:
        rules.append(f"call_{tool} ::= {_call_rule(tool, fmt, string_units(tool, fmt, max_new_tokens))}")
    rules.extend(f"{name} ::= {body}" for name, body in _string_rules(fmt).items())
    return "\n".join(rules) + "\n"


@dataclass
class ToolCallConstraint:
    """A compiled tool-call grammar for one tokenizer, format and budget; ``matcher()`` starts a turn."""

    compiled: Any
    vocab_size: int
    fmt: str
    max_new_tokens: int
    digest: str

    @property
    def label(self) -> str:
        """What records carry in ``logprob_semantics['grammar']``."""
        return f"xgrammar:{self.fmt}:max{self.max_new_tokens}:{self.digest}"

    def matcher(self) -> Any:
        import xgrammar as xgr

        return xgr.GrammarMatcher(self.compiled)


_COMPILERS: dict[int, Any] = {}
_CONSTRAINTS: dict[tuple[int, str, int], ToolCallConstraint] = {}


def compile_constraint(tokenizer: Any, vocab_size: int, stops: set[int], fmt: str,
                       max_new_tokens: int) -> ToolCallConstraint:
    """The tool-call grammar compiled for ``tokenizer`` (logits of ``vocab_size`` entries); cached.

    ``stops`` are the end-of-turn ids: the only tokens allowed once the call is complete.
    """
    try:
        import xgrammar as xgr
    except ImportError as exc:
        raise ConstrainedError("constrained tool calls need xgrammar: pip install 'pdbgym[constrained]'") from exc
    key = (id(tokenizer), fmt, max_new_tokens)
    if key not in _CONSTRAINTS:
        if id(tokenizer) not in _COMPILERS:
            info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                                      stop_token_ids=sorted(stops))
            _COMPILERS[id(tokenizer)] = (tokenizer, xgr.GrammarCompiler(info, max_threads=1))
        ebnf = tool_call_grammar(fmt, max_new_tokens)
        compiled = _COMPILERS[id(tokenizer)][1].compile_grammar(xgr.Grammar.from_ebnf(ebnf))
        digest = hashlib.sha256(ebnf.encode()).hexdigest()[:12]
        _CONSTRAINTS[key] = ToolCallConstraint(compiled, vocab_size, fmt, max_new_tokens, digest)
    return _CONSTRAINTS[key]


class TurnMask:
    """One turn's grammar state: ``apply(logits)`` masks disallowed ids to -inf, ``accept(id)`` advances."""

    def __init__(self, constraint: ToolCallConstraint) -> None:
        import xgrammar as xgr

        self.matcher = constraint.matcher()
        self.bitmask = xgr.allocate_token_bitmask(1, constraint.vocab_size)

    def apply(self, logits: Any) -> Any:
        """``logits`` ([V] float, CPU) with every id the grammar forbids here set to -inf (in place)."""
        import xgrammar as xgr

        self.matcher.fill_next_token_bitmask(self.bitmask)
        xgr.apply_token_bitmask_inplace(logits, self.bitmask[0])
        return logits

    def accept(self, token: int) -> None:
        if not self.matcher.accept_token(token):
            raise ConstrainedError(f"token {token} was sampled outside the tool-call grammar")


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
