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


def _find_function(module: ast.Module, name: str, first_line: int) -> FunctionNode:
    for qualname, func in iter_functions(module):
        if qualname == name and function_first_line(func) == first_line:
            return func
    raise MutationError(f"function {name!r} at line {first_line} not found (source changed since enumeration?)")


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


@functools.lru_cache(maxsize=16)
def _parse_clean(source: str, filename: str) -> ast.Module:
    """The clean file's tree, parsed once per worker for all its mutants (never modified: mutants are
    built on copies of the function)."""
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise MutationError(f"{filename}: does not parse ({exc.msg})") from exc


def render_mutation(source: str, site: MutationSite) -> Mutation:
    """The mutant file text for ``site``; raises MutationError when it cannot be rendered faithfully."""
    module = _parse_clean(source, site.file)
    func = _find_function(module, site.function, site.function_line)
    nodes = walk_body(func)
    if site.node_index >= len(nodes):
        raise MutationError(f"{site.key}: node index out of range")
    replacements = OPERATORS[site.operator](nodes[site.node_index], scope_of(func))
    if site.variant >= len(replacements):
        raise MutationError(f"{site.key}: operator has no variant {site.variant} here")
    target, new, description = replacements[site.variant]
    target_index = next(i for i, n in enumerate(nodes) if n is target)
    data = source.encode()
    starts = _line_starts(data)
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
        texts = [_segment_preserving_text(source, new), ast.unparse(new)]
        attempts = [(_splice_expression(data, starts, target, form.format(text)), intended)
                    for text in dict.fromkeys(t for t in texts if t) for form in ("{}", "({})")]
    for candidate, intended in attempts:
        mutated = _faithful(candidate, site, intended)
        if mutated is not None:
            return Mutation(site, mutated, f"{site.function}: {description}")
    raise MutationError(f"{site.key}: splice does not reproduce the intended change")


def _segment_preserving_text(source: str, new: ast.AST) -> str | None:
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
                text = ast.get_source_segment(source, node)
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


def _faithful(candidate: bytes, site: MutationSite, intended: FunctionNode) -> str | None:
    """The decoded mutant if it parses, compiles and its function equals the intended AST, else None."""
    try:
        text = candidate.decode()
        module = ast.parse(text)
        compile(module, site.file, "exec")
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    try:
        mutated_func = _find_function(module, site.function, site.function_line)
    except MutationError:
        return None
    return text if ast.dump(mutated_func) == ast.dump(intended) else None
