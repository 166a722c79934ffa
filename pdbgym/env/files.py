"""File tools: view and edit, confined to the workspace.

The workspace is writable by the agent's sandboxed processes while these tools run on the host, so
every access goes through ``pdbgym.sandbox.beneath``: walked from a descriptor of the workspace root,
one component at a time without following a link out of it (links inside the project are followed
beneath the root), files checked by ``fstat`` on the opened descriptor, and edits written to a fresh
file in the parent folder's descriptor and renamed over the name there. A folder swapped for a link
to a host folder between two calls (or during one) leads nowhere outside the workspace.
"""

from __future__ import annotations

import errno
import stat
from dataclasses import dataclass
from pathlib import Path

from pdbgym.env.tools import ActionError
from pdbgym.sandbox import beneath

VIEW_MAX_LINES = 300
VIEW_MAX_CHARS = 20_000
MAX_EDIT_CHARS = 100_000
# The sandbox's per-file size limit (RLIMIT_FSIZE): a file above it was not written by a sandboxed
# command, and reading it whole into one observation would only be cut again.
MAX_READ_BYTES = 64 * 1024**2
_HIDDEN = ("__pycache__", ".sandbox_home")


def _refusal(rel_path: str, exc: OSError, purpose: str) -> ActionError:
    """The agent-facing message for an access that failed; never the host's text of a path outside."""
    if isinstance(exc, beneath.LeavesRoot):
        return ActionError(f"'{rel_path}' is outside the project; paths must stay inside the project root ({exc})")
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return ActionError(f"no such file: '{rel_path}' ({purpose})")
    if exc.errno == errno.ELOOP:
        return ActionError(f"'{rel_path}' goes through too many links")
    if exc.errno == errno.EFBIG:
        return ActionError(f"'{rel_path}' is too large to open here ({exc.strerror})")
    return ActionError(f"'{rel_path}' cannot be opened: {exc.strerror or exc}")


def _check_path(rel_path: str) -> None:
    if not rel_path or "\0" in rel_path:
        raise ActionError("a path is required (relative to the project root)")


def _read_text(workspace: Path, rel_path: str, purpose: str) -> tuple[str, str]:
    """(text, resolved relative path) of a text file in the workspace."""
    try:
        data, resolved = beneath.read_bytes(workspace, rel_path, MAX_READ_BYTES)
    except IsADirectoryError:
        raise ActionError(f"'{rel_path}' is a folder ({purpose})") from None
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise ActionError(f"no such file: '{rel_path}' (not a regular file; {purpose})") from None
        raise _refusal(rel_path, exc, purpose) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ActionError(f"'{rel_path}' is not a text file") from None
    # Universal newlines, as the file tools have always read text.
    return text.replace("\r\n", "\n").replace("\r", "\n"), resolved


def _listing(workspace: Path, rel_path: str) -> str | None:
    """The folder's listing, or None when ``rel_path`` is not a folder."""
    try:
        resolved, entries = beneath.list_folder(workspace, rel_path)
    except NotADirectoryError:
        return None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            return None
        raise _refusal(rel_path, exc, "use view on '.' to list the project") from None
    names = []
    for name, mode in entries:
        if name in _HIDDEN or name.startswith(".pdbgym-"):
            continue
        if stat.S_ISLNK(mode):  # shown as what it leads to, when that is a folder inside the project
            mode = beneath.kind_beneath(workspace, name if resolved == "." else f"{resolved}/{name}")
        names.append(name + ("/" if stat.S_ISDIR(mode) else ""))
    return f"{resolved}/\n" + "\n".join(names[:500])


def view(workspace: Path, rel_path: str, start: int | None = None, end: int | None = None) -> str:
    _check_path(rel_path)
    listing = _listing(workspace, rel_path)
    if listing is not None:
        return listing
    text, resolved = _read_text(workspace, rel_path, "use view on '.' to list the project")
    lines = text.splitlines()
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
    return f"{resolved}\n{body}{more}"


@dataclass(frozen=True)
class EditSpan:
    """Lines ``first..last`` (1-based, inclusive; ``last < first`` is an insertion) became ``new_count``."""

    path: str
    first: int
    last: int
    new_count: int


def _editable(workspace: Path, rel_path: str) -> tuple[str, str]:
    """(text, resolved relative path) of the existing file an edit changes."""
    _check_path(rel_path)
    return _read_text(workspace, rel_path, "edit changes existing files")


def _write(workspace: Path, rel_path: str, resolved: str, text: str) -> None:
    """Write the edit to the file that was read (its resolved path, so a link swapped in since is not followed)."""
    try:
        beneath.replace_file(workspace, resolved, text.encode("utf-8"), follow_links=False)
    except OSError as exc:
        raise ActionError(f"'{rel_path}' changed while it was being edited ({exc.strerror or exc}); "
                          "view it and edit again") from None


def edit_lines(workspace: Path, rel_path: str, start: int, end: int, new_text: str) -> EditSpan:
    """Replace lines ``start..end`` with ``new_text`` (``end == start - 1`` inserts before ``start``)."""
    if len(new_text) > MAX_EDIT_CHARS:
        raise ActionError(f"new_text is {len(new_text)} characters; the limit is {MAX_EDIT_CHARS}")
    text, resolved = _editable(workspace, rel_path)
    lines = text.splitlines(keepends=True)
    if start < 1 or end < start - 1 or end > len(lines):
        raise ActionError(f"line range {start}..{end} is not inside '{rel_path}' (it has {len(lines)} lines)")
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    replacement = [] if new_text == "" else (new_text if new_text.endswith("\n") else new_text + "\n").splitlines(True)
    lines[start - 1 : end] = replacement
    _write(workspace, rel_path, resolved, "".join(lines))
    return EditSpan(resolved, start, end, len(replacement))


def edit_string(workspace: Path, rel_path: str, old: str, new: str) -> EditSpan:
    """Replace the one occurrence of ``old`` with ``new``."""
    if not old:
        raise ActionError("'old' must be a non-empty exact string from the file")
    text, resolved = _editable(workspace, rel_path)
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
    _write(workspace, rel_path, resolved, updated)
    return EditSpan(resolved, first, first + old_count - 1, new_count)


def numbered_excerpt(workspace: Path, span: EditSpan, context: int = 3) -> str:
    """The edited region with a little context, so the agent sees what the file now says."""
    start = max(1, span.first - context)
    end = span.first + span.new_count - 1 + context
    return view(workspace, span.path, start, max(start, end))
