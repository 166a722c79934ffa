"""Tool-call formats: parse one tool call out of a model turn, and render an action as model text.

Three formats:

- ``qwen3_xml`` (Qwen3-Coder's template)::

    <tool_call>
    <function=pdb>
    <parameter=command>
    p x
    </parameter>
    </function>
    </tool_call>

- ``hermes`` (Hermes / Qwen2.5 / Qwen3 JSON)::

    <tool_call>
    {"name": "pdb", "arguments": {"command": "p x"}}
    </tool_call>

- ``text`` (pdbgym's protocol for models whose template ignores ``tools=``, e.g. SmolLM2): a fenced
  block tagged ``tool`` holding one JSON object::

    ```tool
    {"tool": "pdb", "args": {"command": "p x"}}
    ```

A turn must hold at least one call; the first is executed and any later ones are ignored.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pdbgym.env.tools import TOOL_SCHEMAS, Action

FORMATS = ("qwen3_xml", "hermes", "text")

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\s]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.DOTALL)
_FENCE = re.compile(r"```tool[ \t]*\n(.*?)(?:```|$)", re.DOTALL)


class ToolCallError(ValueError):
    """A turn holds no well-formed tool call; the message (what is wrong, what to write) is shown to
    the model as its observation."""


def detect_format(chat_template: str | None) -> str:
    """The tool-call format a chat template teaches its model (``text`` when it has none)."""
    template = chat_template or ""
    if "<function=" in template and "<parameter=" in template:
        return "qwen3_xml"
    if "<tool_call>" in template:
        return "hermes"
    return "text"


def parse_tool_call(text: str, fmt: str) -> Action:
    """The first tool call in ``text`` as an ``Action``; ``ToolCallError`` when there is none."""
    if fmt == "qwen3_xml":
        return _parse_qwen3_xml(text)
    if fmt == "hermes":
        return _parse_hermes(text)
    if fmt == "text":
        return _parse_text(text)
    raise ValueError(f"unknown tool-call format {fmt!r}; choose one of {FORMATS}")


def coerce_args(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """Turn string values into the schema's integers where the schema says integer ("12" -> 12)."""
    props = TOOL_SCHEMAS.get(tool, {}).get("parameters", {}).get("properties", {})
    coerced = dict(args)
    for key, value in args.items():
        if props.get(key, {}).get("type") == "integer" and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            coerced[key] = int(value.strip())
    return coerced


def _parse_qwen3_xml(text: str) -> Action:
    block = _TOOL_CALL.search(text)
    if block is None:
        # Some checkpoints drop the outer <tool_call>; the <function=...> block is unambiguous anyway.
        body = text if "<function=" in text else None
        if body is None:
            raise ToolCallError(_missing("qwen3_xml"))
    else:
        body = block.group(1)
    function = _FUNCTION.search(body)
    if function is None:
        raise ToolCallError("the <tool_call> block holds no <function=NAME> ... </function>. " + _missing("qwen3_xml"))
    args: dict[str, Any] = {}
    for name, value in _PARAMETER.findall(function.group(2)):
        args[name] = _strip_one_newline(value)
    tool = function.group(1).strip()
    return Action(tool=tool, args=coerce_args(tool, args))


def _parse_hermes(text: str) -> Action:
    block = _TOOL_CALL.search(text)
    if block is None:
        raise ToolCallError(_missing("hermes"))
    payload = _load_json_object(block.group(1), "hermes")
    name = payload.get("name")
    if not isinstance(name, str):
        raise ToolCallError('the tool call JSON needs a string "name" field. ' + _missing("hermes"))
    args = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(args, str):  # some models double-encode the arguments
        args = _load_json_object(args, "hermes")
    if not isinstance(args, dict):
        raise ToolCallError('"arguments" must be a JSON object. ' + _missing("hermes"))
    return Action(tool=name, args=coerce_args(name, args))


def _parse_text(text: str) -> Action:
    block = _FENCE.search(text)
    if block is None:
        raise ToolCallError(_missing("text"))
    payload = _load_json_object(block.group(1), "text")
    name = payload.get("tool", payload.get("name"))
    if not isinstance(name, str):
        raise ToolCallError('the JSON object needs a string "tool" field. ' + _missing("text"))
    args = payload.get("args", payload.get("arguments", {}))
    if not isinstance(args, dict):
        raise ToolCallError('"args" must be a JSON object. ' + _missing("text"))
    return Action(tool=name, args=coerce_args(name, args))


def _load_json_object(raw: str, fmt: str) -> dict[str, Any]:
    try:
        payload = json.loads(raw.strip())
    except json.JSONDecodeError as exc:
        raise ToolCallError(f"the tool call is not valid JSON ({exc.msg} at char {exc.pos}). " + _missing(fmt)) from exc
    if not isinstance(payload, dict):
        raise ToolCallError("the tool call must be a JSON object. " + _missing(fmt))
    return payload


def _strip_one_newline(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def render_tool_call(action: Action, fmt: str) -> str:
    """``action`` written the way a model of format ``fmt`` writes it (parses back to ``action``)."""
    if fmt == "qwen3_xml":
        params = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in action.args.items())
        return f"<tool_call>\n<function={action.tool}>\n{params}</function>\n</tool_call>"
    if fmt == "hermes":
        payload = json.dumps({"name": action.tool, "arguments": action.args})
        return f"<tool_call>\n{payload}\n</tool_call>"
    if fmt == "text":
        payload = json.dumps({"tool": action.tool, "args": action.args})
        return f"```tool\n{payload}\n```"
    raise ValueError(f"unknown tool-call format {fmt!r}; choose one of {FORMATS}")


def _missing(fmt: str) -> str:
    example = render_tool_call(Action(tool="pdb", args={"command": "p x"}), fmt)
    return f"Reply with exactly one tool call, for example:\n{example}"
