"""Tool-call parsing in the three formats: well-formed, sloppy, and malformed turns."""

import pytest

from pdbgym.agent.toolcalls import FORMATS, ToolCallError, detect_format, parse_tool_call, render_tool_call
from pdbgym.env.tools import Action

ACTIONS = [
    Action("pdb", {"command": "b calc/ops.py:6"}),
    Action("view", {"path": "calc/ops.py", "start": 1, "end": 9}),
    Action("edit", {"path": "a.py", "start": 3, "end": 4, "new_text": "    x = {'k': \"v\"}\n    return x\n"}),
    Action("submit", {}),
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.tool)
def test_render_then_parse_round_trips(fmt, action):
    text = f"I will look at it.\n{render_tool_call(action, fmt)}\n"
    assert parse_tool_call(text, fmt) == action


def test_qwen3_xml_coerces_integers_and_tolerates_missing_closers():
    text = ("<tool_call>\n<function=view>\n<parameter=path>\ncalc/ops.py\n</parameter>\n"
            "<parameter=start>\n3\n<parameter=end>\n7\n")
    assert parse_tool_call(text, "qwen3_xml") == Action("view", {"path": "calc/ops.py", "start": 3, "end": 7})


def test_hermes_accepts_double_encoded_arguments_and_takes_first_call():
    text = ('<tool_call>\n{"name": "pdb", "arguments": "{\\"command\\": \\"p x\\"}"}\n</tool_call>'
            '<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    assert parse_tool_call(text, "hermes") == Action("pdb", {"command": "p x"})


@pytest.mark.parametrize(("fmt", "text", "needle"), [
    ("text", "I think the bug is in sub.", "exactly one tool call"),
    ("text", "```tool\n{\"tool\": \"pdb\", \"args\": {\"command\": \"p x\"\n```", "not valid JSON"),
    ("text", "```tool\n[1, 2]\n```", "JSON object"),
    ("text", "```tool\n{\"args\": {}}\n```", '"tool" field'),
    ("hermes", "<tool_call>{\"arguments\": {}}</tool_call>", '"name"'),
    ("hermes", "no call here", "<tool_call>"),
    ("qwen3_xml", "<tool_call>pdb p x</tool_call>", "<function=NAME>"),
])
def test_malformed_calls_explain_what_to_write(fmt, text, needle):
    with pytest.raises(ToolCallError) as caught:
        parse_tool_call(text, fmt)
    assert needle in str(caught.value)
    assert "for example" in str(caught.value)


def test_detect_format_from_chat_templates(smol_tokenizer):
    assert detect_format(smol_tokenizer.chat_template) == "text"  # SmolLM2's ChatML ignores tools
    assert detect_format("{{ '<tool_call>\\n<function=' }}{{ '<parameter=' }}") == "qwen3_xml"
    assert detect_format("{{- '<tool_call>\\n{\"name\": ' }}") == "hermes"
    assert detect_format(None) == "text"
