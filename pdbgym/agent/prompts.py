"""The system prompt and the first user message of an episode."""

from __future__ import annotations

from pdbgym.agent.toolcalls import render_tool_call
from pdbgym.env.tools import Action, ToolSpec

_TASK_TEXT = """You are debugging a Python project. A test fails; find the bug in the code and fix it.
You work in a live pdb session that is already stopped at the start of the failing test run.
Each turn, call exactly one tool. The tool's output comes back as the next message.
Investigate with pdb (break, continue, print, step) and view, fix the code with edit, check with
run_tests, and call submit when the failing tests pass. Do not edit the tests."""


def _describe_tools(tools: list[ToolSpec]) -> str:
    lines = []
    for spec in tools:
        function = spec["function"]
        props = function["parameters"].get("properties", {})
        required = set(function["parameters"].get("required", []))
        args = ", ".join(f"{name}: {p['type']}{'' if name in required else ' (optional)'}" for name, p in props.items())
        lines.append(f"- {function['name']}({args}): {function['description']}")
    return "\n".join(lines)


def system_prompt(fmt: str, tools: list[ToolSpec]) -> str:
    """The system message. For ``text`` it documents the tools and the fenced-block protocol; native
    formats get their tool list from the chat template (``tools=``), so only the task is explained."""
    if fmt != "text":
        return _TASK_TEXT
    example = render_tool_call(Action(tool="pdb", args={"command": "b app.py:12"}), "text")
    edit = render_tool_call(Action(tool="edit", args={"path": "app.py", "old": "a - b", "new": "a + b"}), "text")
    return (f"{_TASK_TEXT}\n\nTools:\n{_describe_tools(tools)}\n\n"
            "To call a tool, write a fenced block tagged tool holding one JSON object with the tool name "
            f"and its arguments, for example:\n{example}\nor\n{edit}\nThink briefly, then write the block.")


def first_user_message(observation: str) -> str:
    """The task statement and the pdb session's first output, as returned by ``env.reset()``."""
    return observation
