"""A person at the terminal drives the same tools as a model.

Input lines:  ``view PATH [START [END]]`` · ``edit PATH START END`` (then the new text, ended by a line
holding a single ``.``) · ``replace PATH`` (old text, ``.``, new text, ``.``) · ``tests [all]`` ·
``submit`` · anything else is sent to pdb as it is (``pdb CMD`` also works).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from rich.console import Console

from pdbgym.env.tools import Action
from pdbgym.tasks.model import Task

HELP = __doc__ or ""


class HumanPolicy:
    name = "human"
    interactive = True  # reads the terminal: asked in the main thread so Ctrl-C reaches it

    def __init__(self, read_line: Callable[[str], str] = input, console: Console | None = None) -> None:
        self._read = read_line
        self._console = console or Console()

    def reset(self, task: Task, observation: str) -> None:
        self._console.rule(f"[bold]{task.instance_id}")
        self._console.print(HELP.strip(), style="dim", markup=False)

    def _block(self) -> str:
        lines = []
        while (line := self._read("... ")) != ".":
            lines.append(line)
        return "\n".join(lines) + ("\n" if lines else "")

    def next_action(self, observation: str) -> Action:
        self._console.print(observation, markup=False, highlight=False)
        while True:
            try:
                return self._parse(self._read("pdbgym> ").strip())
            except (ValueError, IndexError) as exc:
                self._console.print(f"[red]could not read that ({exc}); see the help above[/]")

    def _parse(self, line: str) -> Action:
        word, _, rest = line.partition(" ")
        if word == "view":
            parts = shlex.split(rest)
            args: dict = {"path": parts[0]}
            if len(parts) > 1:
                args["start"] = int(parts[1])
            if len(parts) > 2:
                args["end"] = int(parts[2])
            return Action("view", args)
        if word == "edit":
            path, start, end = shlex.split(rest)
            return Action("edit", {"path": path, "start": int(start), "end": int(end), "new_text": self._block()})
        if word == "replace":
            old, new = self._block(), self._block()
            return Action("edit", {"path": rest.strip(), "old": old, "new": new})
        if word == "tests":
            return Action("run_tests", {"which": "all" if rest.strip() == "all" else "failing"})
        if word == "submit":
            return Action("submit", {})
        if word == "pdb":
            return Action("pdb", {"command": rest})
        return Action("pdb", {"command": line})
