"""The environment's tools: names, JSON schemas (offered to models as functions) and argument checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "pdb": {
        "description": (
            "Send one command to the live pdb session running the failing test (b, c, n, s, r, p, pp, l, "
            "ll, w, u, d, until, display, cl, condition, tbreak, ...). Long-running commands are "
            "interrupted and you land in the frame that was running."
        ),
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "A pdb command, e.g. 'b app/core.py:42'"}},
            "required": ["command"],
        },
    },
    "view": {
        "description": "Show a file with line numbers (optionally a line range), or list a folder.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the project root"},
                "start": {"type": "integer", "description": "First line (1-based), optional"},
                "end": {"type": "integer", "description": "Last line (inclusive), optional"},
            },
            "required": ["path"],
        },
    },
    "edit": {
        "description": (
            "Edit a file: replace lines start..end (1-based, inclusive) with new_text, or replace the "
            "exact string old (which must occur once) with new. The pdb session restarts afterwards with "
            "your breakpoints moved to follow the edit."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "start": {"type": "integer"},
                "end": {"type": "integer"},
                "new_text": {"type": "string"},
                "old": {"type": "string"},
                "new": {"type": "string"},
            },
            "required": ["path"],
        },
    },
    "run_tests": {
        "description": "Run the failing tests (which='failing', default) or the whole task suite (which='all').",
        "parameters": {
            "type": "object",
            "properties": {"which": {"type": "string", "enum": ["failing", "all"]}},
            "required": [],
        },
    },
    "submit": {
        "description": (
            "Finish: your change is graded as source text (edits to the project's text files and new .py "
            "files; bytecode, links, binary or hidden files are not taken) on pristine test files, and the "
            "episode ends."
        ),
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}
TOOL_NAMES = tuple(TOOL_SCHEMAS)


def tool_specs() -> list[dict[str, Any]]:
    """The tools in OpenAI function-calling format."""
    return [
        {"type": "function", "function": {"name": name, **schema}} for name, schema in TOOL_SCHEMAS.items()
    ]


@dataclass(frozen=True)
class Action:
    """One tool call: ``tool`` is a name from ``TOOL_NAMES``, ``args`` its arguments."""

    tool: str
    args: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def coerce(cls, action: Action | dict[str, Any]) -> Action:
        if isinstance(action, Action):
            return action
        if isinstance(action, dict) and isinstance(action.get("tool"), str):
            args = action.get("args", {})
            return cls(tool=action["tool"], args=args if isinstance(args, dict) else {"_invalid": args})
        raise ActionError(f"an action must be {{'tool': NAME, 'args': {{...}}}}, got {action!r:.200}")

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "args": self.args}


class ActionError(ValueError):
    """A malformed action; its message becomes the observation."""


def check_args(action: Action) -> None:
    """Raise ActionError naming the problem when the action does not fit its tool's schema."""
    if action.tool not in TOOL_SCHEMAS:
        raise ActionError(f"unknown tool '{action.tool}'. Tools: {', '.join(TOOL_NAMES)}.")
    schema = TOOL_SCHEMAS[action.tool]["parameters"]
    props: dict[str, Any] = schema["properties"]
    unknown = sorted(set(action.args) - set(props))
    if unknown:
        raise ActionError(f"tool '{action.tool}' has no argument(s) {unknown}; it takes {sorted(props) or 'none'}.")
    for name in schema["required"]:
        if name not in action.args:
            raise ActionError(f"tool '{action.tool}' needs argument '{name}'.")
    types = {"string": str, "integer": int}
    for name, value in action.args.items():
        expected = types[props[name]["type"]]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ActionError(f"argument '{name}' of '{action.tool}' must be {props[name]['type']}, got {value!r:.80}.")
        allowed = props[name].get("enum")
        if allowed and value not in allowed:
            raise ActionError(f"argument '{name}' of '{action.tool}' must be one of {allowed}, got {value!r}.")


@dataclass
class StepResult:
    observation: str
    done: bool
    info: dict[str, Any] = field(default_factory=dict)

    def __iter__(self):  # lets callers unpack ``obs, done, info = env.step(a)``
        return iter((self.observation, self.done, self.info))
