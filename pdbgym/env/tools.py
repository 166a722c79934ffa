"""The environment's tools: names, JSON schemas (offered to models as functions) and argument checks."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, NotRequired, TypedDict, cast

from pdbgym.fileio import JSONValue


class ArgumentSchema(TypedDict):
    """One argument of a tool: its JSON type (``string`` or ``integer``), what it means, its allowed values."""

    type: Literal["string", "integer"]
    description: NotRequired[str]
    enum: NotRequired[list[str]]


class Parameters(TypedDict):
    """A tool's arguments as a JSON-schema object."""

    type: Literal["object"]
    properties: dict[str, ArgumentSchema]
    required: list[str]


class ToolSchema(TypedDict):
    description: str
    parameters: Parameters


class FunctionSpec(ToolSchema):
    name: str


class ToolSpec(TypedDict):
    """A tool in OpenAI function-calling format."""

    type: Literal["function"]
    function: FunctionSpec


class ToolArgs(TypedDict, total=False):
    """The arguments of every tool, as ``check_args`` lets them through (each tool takes those of its schema)."""

    command: str  # pdb
    path: str  # view, edit
    start: int
    end: int
    new_text: str  # edit by line range
    old: str  # edit by string
    new: str
    which: str  # run_tests: failing or all


TOOL_SCHEMAS: dict[str, ToolSchema] = {
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


def tool_specs() -> list[ToolSpec]:
    """The tools in OpenAI function-calling format."""
    return [
        {"type": "function", "function": {"name": name, **schema}} for name, schema in TOOL_SCHEMAS.items()
    ]


class ActionDict(TypedDict):
    tool: str
    args: dict[str, JSONValue]


@dataclass(frozen=True)
class Action:
    """One tool call: ``tool`` is a name from ``TOOL_NAMES``, ``args`` its arguments."""

    tool: str
    args: dict[str, JSONValue] = field(default_factory=dict)  # as the model gave them: ``check_args`` checks

    @classmethod
    def coerce(cls, action: Action | Mapping[str, JSONValue]) -> Action:
        if isinstance(action, Action):
            return action
        if isinstance(action, dict) and isinstance(tool := action.get("tool"), str):
            args = action.get("args", {})
            return cls(tool=tool, args=args if isinstance(args, dict) else {"_invalid": args})
        raise ActionError(f"an action must be {{'tool': NAME, 'args': {{...}}}}, got {action!r:.200}")

    def to_dict(self) -> ActionDict:
        return {"tool": self.tool, "args": self.args}


class ActionError(ValueError):
    """A malformed action; its message becomes the observation."""


def check_args(action: Action) -> ToolArgs:
    """``action.args`` as its tool's arguments; ActionError naming the problem when they do not fit its schema."""
    if action.tool not in TOOL_SCHEMAS:
        raise ActionError(f"unknown tool '{action.tool}'. Tools: {', '.join(TOOL_NAMES)}.")
    schema = TOOL_SCHEMAS[action.tool]["parameters"]
    props = schema["properties"]
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
    return cast(ToolArgs, action.args)  # each name known, each value of its schema's type


class StepInfo(TypedDict):
    """What a step tells besides its observation: turns used, and how the episode ended once it has."""

    actions_used: int
    termination_reason: NotRequired[str]
    final_test_passed: NotRequired[bool]


@dataclass
class StepResult:
    observation: str
    done: bool
    info: StepInfo

    def __iter__(self) -> Iterator[str | bool | StepInfo]:  # lets callers unpack ``obs, done, info = env.step(a)``
        return iter((self.observation, self.done, self.info))
