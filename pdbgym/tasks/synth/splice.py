"""Render a :class:`MutationSite` into source text by splicing only the changed span (pure: no I/O).

``ast`` column offsets are UTF-8 byte offsets, so splicing happens on the encoded bytes.
"""

from __future__ import annotations

import ast
import copy
import functools

from pdbgym.tasks.synth.operators import (
    OPERATORS,
    FunctionNode,
    Mutation,
    MutationError,
    MutationSite,
    function_first_line,
    iter_functions,
    scope_of,
    walk_body,
)


def _replace_child(root: ast.AST, old: ast.AST, new: ast.AST | None, fill_pass: bool = True) -> None:
    """Put ``new`` where ``old`` is under ``root``; None deletes a statement, leaving ``pass`` in a
    block it empties when ``fill_pass`` (an emptied ``elif`` branch instead disappears)."""
    for parent in ast.walk(root):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list):
                for position, item in enumerate(value):
                    if item is old:
                        if new is None:
                            del value[position]
                            if not value and fill_pass:
                                value.append(ast.Pass())
                            return
                        value[position] = new
                        return
    raise MutationError("mutation target not found under its function")


def _byte_offset(line_starts: list[int], lineno: int, col: int) -> int:
    return line_starts[lineno - 1] + col


def _line_starts(data: bytes) -> list[int]:
    starts = [0]
    for index, byte in enumerate(data):
        if byte == 0x0A:
            starts.append(index + 1)
    return starts


def _splice_expression(data: bytes, starts: list[int], target: ast.AST, text: str) -> bytes:
    begin = _byte_offset(starts, target.lineno, target.col_offset)  # type: ignore[attr-defined]
    end = _byte_offset(starts, target.end_lineno, target.end_col_offset)  # type: ignore[attr-defined]
    return data[:begin] + text.encode() + data[end:]


def _splice_statement_removal(data: bytes, starts: list[int], target: ast.stmt, only_statement: bool) -> bytes:
    begin = _byte_offset(starts, target.lineno, target.col_offset)
    end = _byte_offset(starts, target.end_lineno or target.lineno, target.end_col_offset or 0)
    line_begin = starts[target.lineno - 1]
    end_line = target.end_lineno or target.lineno
    line_end = starts[end_line] if end_line < len(starts) else len(data)
    before, after = data[line_begin:begin], data[end:line_end]
    # A statement sharing its line with another (``a = 1; b = 2``) cannot be removed by deleting lines.
    if before.strip() or (after.strip() and not after.strip().startswith(b"#")):
        raise MutationError("statement shares its line with other code")
    replacement = before + b"pass\n" if only_statement else b""
    return data[:line_begin] + replacement + data[line_end:]


def _intended_function(func: FunctionNode, target_index: int, new: ast.AST | None,
                       fill_pass: bool = True) -> FunctionNode:
    intended = copy.deepcopy(func)
    target_copy = walk_body(intended)[target_index]
    _replace_child(intended, target_copy, copy.deepcopy(new) if new is not None else None, fill_pass)
    return intended


class _CleanFile:
    """A clean file parsed once per worker for all its mutants (its trees are never modified: mutants are
    built on copies): the encoded text, where each line starts, and every function with the top-level
    statement holding it (only that statement's text changes in a mutant)."""

    def __init__(self, source: str, filename: str) -> None:
        try:
            module = ast.parse(source)
        except SyntaxError as exc:
            raise MutationError(f"{filename}: does not parse ({exc.msg})") from exc
        self.data = source.encode()
        self.starts = _line_starts(self.data)
        self.functions: dict[tuple[str, int], tuple[FunctionNode, ast.stmt]] = {}
        for statement in module.body:
            holder = ast.Module(body=[statement], type_ignores=[])
            for qualname, func in iter_functions(holder):
                self.functions.setdefault((qualname, function_first_line(func)), (func, statement))
        self._bodies: dict[int, tuple[list[ast.AST], object]] = {}

    def function(self, name: str, first_line: int) -> tuple[FunctionNode, ast.stmt]:
        found = self.functions.get((name, first_line))
        if found is None:
            raise MutationError(f"function {name!r} at line {first_line} not found (source changed since enumeration?)")
        return found

    def body_and_scope(self, func: FunctionNode) -> tuple[list[ast.AST], object]:
        if id(func) not in self._bodies:
            self._bodies[id(func)] = (walk_body(func), scope_of(func))
        return self._bodies[id(func)]

    def segment(self, node: ast.AST) -> str | None:
        """The exact source text of an expression node of this file (``ast.get_source_segment``, without
        splitting the whole file into lines for every call)."""
        if getattr(node, "end_lineno", None) is None:
            return None
        begin = _byte_offset(self.starts, node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = _byte_offset(self.starts, node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return self.data[begin:end].decode()

    def statement_span(self, statement: ast.stmt) -> tuple[int, int, int]:
        """(first line, byte offset of its start, byte offset of the end of its last line) of a
        top-level statement, decorators included."""
        first = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))])
        last = statement.end_lineno or statement.lineno
        end = self.starts[last] if last < len(self.starts) else len(self.data)
        return first, self.starts[first - 1], end


@functools.lru_cache(maxsize=16)
def _clean_file(source: str, filename: str) -> _CleanFile:
    return _CleanFile(source, filename)


def render_mutation(source: str, site: MutationSite) -> Mutation:
    """The mutant file text for ``site``; raises MutationError when it cannot be rendered faithfully."""
    clean = _clean_file(source, site.file)
    func, statement = clean.function(site.function, site.function_line)
    nodes, scope = clean.body_and_scope(func)
    if site.node_index >= len(nodes):
        raise MutationError(f"{site.key}: node index out of range")
    replacements = OPERATORS[site.operator](nodes[site.node_index], scope)
    if site.variant >= len(replacements):
        raise MutationError(f"{site.key}: operator has no variant {site.variant} here")
    target, new, description = replacements[site.variant]
    target_index = next(i for i, n in enumerate(nodes) if n is target)
    data, starts = clean.data, clean.starts
    attempts: list[tuple[bytes, FunctionNode]] = []
    if new is None:
        assert isinstance(target, ast.stmt)
        only = len(_statement_list_holding(func, target)) == 1
        # A sole statement leaves ``pass`` behind, except an ``elif`` branch, whose lines just go.
        for fill_pass in ((True, False) if only else (False,)):
            attempts.append((_splice_statement_removal(data, starts, target, fill_pass),
                             _intended_function(func, target_index, None, fill_pass)))
    else:
        intended = _intended_function(func, target_index, new)
        texts = [_segment_preserving_text(clean, new), ast.unparse(new)]
        attempts = [(_splice_expression(data, starts, target, form.format(text)), intended)
                    for text in dict.fromkeys(t for t in texts if t) for form in ("{}", "({})")]
    first_line, begin, end = clean.statement_span(statement)
    for candidate, intended in attempts:
        # Every splice falls inside the function's top-level statement: the rest of the file is the
        # clean text, so only that statement's new text needs checking.
        changed = candidate[begin:len(candidate) - (len(data) - end)]
        if candidate[:begin] != data[:begin] or candidate[len(candidate) - (len(data) - end):] != data[end:]:
            continue
        if _faithful(changed, first_line, site, intended):
            return Mutation(site, candidate.decode(), f"{site.function}: {description}")
    raise MutationError(f"{site.key}: splice does not reproduce the intended change")


def _segment_preserving_text(clean: _CleanFile, new: ast.AST) -> str | None:
    """Source for ``new`` that reuses the original text of every subexpression copied from the file.

    ``ast.unparse`` would normalize those (quotes, raw-string prefixes, spacing), making the diff
    larger than the bug and hinting at its site. Only the changed parts are unparsed; the caller's
    faithfulness check rejects a result whose precedence differs.
    """
    segments: dict[str, str] = {}
    root = copy.deepcopy(new)

    class _Placeholders(ast.NodeTransformer):
        def visit(self, node: ast.AST) -> ast.AST:
            if node is not root and isinstance(node, ast.expr) and getattr(node, "end_col_offset", None) is not None:
                text = clean.segment(node)
                if text is not None:
                    name = f"__pdbgym_segment_{len(segments)}__"
                    segments[name] = text
                    return ast.Name(id=name, ctx=ast.Load())
            return self.generic_visit(node)

    rendered = ast.unparse(_Placeholders().visit(root))
    if not segments:
        return None
    for name, text in segments.items():
        rendered = rendered.replace(name, text)
    return rendered


def _statement_list_holding(func: FunctionNode, statement: ast.stmt) -> list[ast.stmt]:
    for parent in ast.walk(func):
        for _, value in ast.iter_fields(parent):
            if isinstance(value, list) and any(item is statement for item in value):
                return value
    raise MutationError("statement not found in its function")


def _faithful(changed: bytes, first_line: int, site: MutationSite, intended: FunctionNode) -> bool:
    """Whether a mutant's new top-level statement text (starting at line ``first_line``) parses,
    compiles and holds the site's function with exactly the intended AST."""
    try:
        text = "\n" * (first_line - 1) + changed.decode()  # keeps the function's line numbers
        module = ast.parse(text)
        compile(module, site.file, "exec")
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return False
    for qualname, func in iter_functions(module):
        if qualname == site.function and function_first_line(func) == site.function_line:
            return ast.dump(func) == ast.dump(intended)
    return False
