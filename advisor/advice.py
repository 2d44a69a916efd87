"""Advice advisor cannot verify: the vectorised form of a row-wise apply.

A row-wise apply cannot be rewritten automatically in general, so advisor never runs this
advice; it shows it beside the line it found, labelled unverified. Where the row function is a
single expression over `row["col"]` or `row.col`, the expression is rewritten over whole
columns (conditional expressions become `np.where`); otherwise a template is shown.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional


def row_function(source: str, line: int) -> Optional[ast.FunctionDef]:
    """The innermost function defined in `source` that contains `line`."""
    found = None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.Lambda)) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if found is None or node.lineno >= found.lineno:
                found = node
    return found


class _Columns(ast.NodeTransformer):
    """row["a"] and row.a -> frame["a"]; a if c else b -> np.where(c, a, b); and/or/not -> & | ~."""

    def __init__(self, row: str):
        self.row, self.ok = row, True

    def visit_Subscript(self, node):
        if isinstance(node.value, ast.Name) and node.value.id == self.row:
            return ast.Subscript(ast.Name("frame", ast.Load()), node.slice, ast.Load())
        return self.generic_visit(node)

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name) and node.value.id == self.row:
            return ast.Subscript(ast.Name("frame", ast.Load()), ast.Constant(node.attr), ast.Load())
        return self.generic_visit(node)

    def visit_Name(self, node):
        if node.id == self.row:
            self.ok = False  # the whole row is used: not a column expression
        return node

    def visit_IfExp(self, node):
        node = self.generic_visit(node)
        where = ast.Attribute(ast.Name("np", ast.Load()), "where", ast.Load())
        return ast.Call(where, [node.test, node.body, node.orelse], [])

    def visit_BoolOp(self, node):
        node = self.generic_visit(node)
        op = ast.BitAnd() if isinstance(node.op, ast.And) else ast.BitOr()
        result = node.values[0]
        for value in node.values[1:]:
            result = ast.BinOp(result, op, value)
        return result

    def visit_UnaryOp(self, node):
        node = self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.UnaryOp(ast.Invert(), node.operand)
        return node

    def visit_Call(self, node):
        self.ok = False  # a function call per row may not accept columns
        return node


def vectorised(function) -> Optional[str]:
    """The row function's expression over whole columns, or None when it is not one expression."""
    if isinstance(function, ast.Lambda):
        args, body = function.args.args, function.body
    else:
        statements = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(statements) != 1 or not isinstance(statements[0], ast.Return) or statements[0].value is None:
            return None
        args, body = function.args.args, statements[0].value
    if len(args) != 1:
        return None
    rewriter = _Columns(args[0].arg)
    rewritten = rewriter.visit(body)
    return ast.unparse(rewritten) if rewriter.ok else None


def rowwise_advice(callback: dict) -> dict:
    """Advice for one row-wise callback found by the profiler (caller and callee lines)."""
    caller, callee = callback["caller"], callback["callee"]
    where = f"{Path(caller['file']).name}:{caller['line']}"
    try:
        function = row_function(Path(callee["file"]).read_text(), callee["line"])
    except (OSError, SyntaxError):
        function = None
    expression = vectorised(function) if function is not None else None
    if expression:
        suggestion = f"values = {expression}  # whole columns at once, instead of the row-wise call"
    else:
        suggestion = ("# rewrite the row function over whole columns: frame['a'] * frame['b'] instead of "
                      "row['a'] * row['b'];\n# np.where(condition, a, b) instead of if/else; .str and .dt "
                      "methods instead of per-value calls")
    return {
        "kind": "vectorise",
        "verified": False,
        "where": where,
        "code": caller["code"],
        "row_function": f"{Path(callee['file']).name}:{callee['line']}",
        "share_of_transform": caller["inclusive_share"],
        "suggestion": suggestion,
        "note": "unverified advice: advisor cannot rewrite a row-wise apply for you, so it never measured this",
    }


def advice_for(hotspots: dict) -> list[dict]:
    return [rowwise_advice(callback) for callback in (hotspots.get("callbacks") or [])[:1]]
