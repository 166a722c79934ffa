"""File tools: view and edit, confined to the workspace."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pdbgym.env.tools import ActionError
from pdbgym.fileio import write_text_atomic

VIEW_MAX_LINES = 300
VIEW_MAX_CHARS = 20_000
MAX_EDIT_CHARS = 100_000


def resolve_in_workspace(workspace: Path, rel_path: str) -> Path:
    """The absolute path of ``rel_path``, refusing anything that resolves outside the workspace."""
    if not rel_path or "\0" in rel_path:
        raise ActionError("a path is required (relative to the project root)")
    root = workspace.resolve()
    candidate = (root / rel_path).resolve()
    if candidate != root and root not in candidate.parents:
        raise ActionError(f"'{rel_path}' is outside the project; paths must stay inside the project root")
    return candidate


def _relative(workspace: Path, path: Path) -> str:
    return str(path.relative_to(workspace.resolve())) or "."


def view(workspace: Path, rel_path: str, start: int | None = None, end: int | None = None) -> str:
    path = resolve_in_workspace(workspace, rel_path)
    if path.is_dir():
        entries = []
        for child in sorted(path.iterdir()):
            if child.name in ("__pycache__", ".sandbox_home") or child.name.startswith(".pdbgym-"):
                continue
            entries.append(child.name + ("/" if child.is_dir() else ""))
        return f"{_relative(workspace, path)}/\n" + "\n".join(entries[:500])
    if not path.is_file():
        raise ActionError(f"no such file: '{rel_path}' (use view on '.' to list the project)")
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise ActionError(f"'{rel_path}' is not a text file") from None
    first = max(1, start or 1)
    last = min(len(lines), end if end is not None else first + VIEW_MAX_LINES - 1)
    if last - first + 1 > VIEW_MAX_LINES:
        last = first + VIEW_MAX_LINES - 1
    if first > max(1, len(lines)):
        raise ActionError(f"'{rel_path}' has {len(lines)} lines; line {first} does not exist")
    body = "\n".join(f"{n:>5}  {lines[n - 1]}" for n in range(first, last + 1))
    if len(body) > VIEW_MAX_CHARS:
        body = body[:VIEW_MAX_CHARS] + "\n[... view cut; ask for a smaller line range ...]"
    more = f"\n[lines {first}-{last} of {len(lines)}]" if (first > 1 or last < len(lines)) else ""
    return f"{_relative(workspace, path)}\n{body}{more}"


@dataclass(frozen=True)
class EditSpan:
    """Lines ``first..last`` (1-based, inclusive; ``last < first`` is an insertion) became ``new_count``."""

    path: str
    first: int
    last: int
    new_count: int


def _editable(workspace: Path, rel_path: str) -> tuple[Path, str]:
    path = resolve_in_workspace(workspace, rel_path)
    if not path.is_file():
        raise ActionError(f"no such file: '{rel_path}' (edit changes existing files)")
    try:
        return path, path.read_text()
    except UnicodeDecodeError:
        raise ActionError(f"'{rel_path}' is not a text file") from None


def edit_lines(workspace: Path, rel_path: str, start: int, end: int, new_text: str) -> EditSpan:
    """Replace lines ``start..end`` with ``new_text`` (``end == start - 1`` inserts before ``start``)."""
    if len(new_text) > MAX_EDIT_CHARS:
        raise ActionError(f"new_text is {len(new_text)} characters; the limit is {MAX_EDIT_CHARS}")
    path, text = _editable(workspace, rel_path)
    lines = text.splitlines(keepends=True)
    if start < 1 or end < start - 1 or end > len(lines):
        raise ActionError(f"line range {start}..{end} is not inside '{rel_path}' (it has {len(lines)} lines)")
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    replacement = [] if new_text == "" else (new_text if new_text.endswith("\n") else new_text + "\n").splitlines(True)
    lines[start - 1 : end] = replacement
    write_text_atomic(path, "".join(lines))
    return EditSpan(_relative(workspace, path), start, end, len(replacement))


def edit_string(workspace: Path, rel_path: str, old: str, new: str) -> EditSpan:
    """Replace the one occurrence of ``old`` with ``new``."""
    if not old:
        raise ActionError("'old' must be a non-empty exact string from the file")
    path, text = _editable(workspace, rel_path)
    count = text.count(old)
    if count != 1:
        where = "does not occur" if count == 0 else f"occurs {count} times (include more context)"
        raise ActionError(f"the string given as 'old' {where} in '{rel_path}'")
    offset = text.index(old)
    first = text.count("\n", 0, offset) + 1
    # The lines ``old`` touches; the file's line count changes by exactly the change in newlines.
    old_count = old.count("\n") + (0 if old.endswith("\n") else 1)
    new_count = max(0, old_count + new.count("\n") - old.count("\n"))
    updated = text.replace(old, new, 1)
    write_text_atomic(path, updated)
    return EditSpan(_relative(workspace, path), first, first + old_count - 1, new_count)


def numbered_excerpt(workspace: Path, span: EditSpan, context: int = 3) -> str:
    """The edited region with a little context, so the agent sees what the file now says."""
    start = max(1, span.first - context)
    end = span.first + span.new_count - 1 + context
    return view(workspace, span.path, start, max(start, end))
