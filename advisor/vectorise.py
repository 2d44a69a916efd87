"""Row-wise code rewritten over whole columns, on its source (AST), for a candidate plan.

A row function (`frame.apply(f, axis=1)`: `f(row)` reads `row["a"]` or `row.a`) or a value
function (`series.apply(f)`, `series.map(f)`: `f(x)`) becomes one function of the whole frame or
series. Its expressions are kept where NumPy and pandas compute them the same way, and rewritten
where they must be: `x if c else y` into `np.where`, an `if`/`elif`/`else` chain of returns
into `np.select`, `and`/`or`/`not` into `&`/`|`/`~`, `a < b < c` into two comparisons, `in` a
constant into `isin`, string methods into `.str`, datetime fields into `.dt`, a lookup in a
constant dict into `.map`, and `max`/`min` of two into the comparison Python makes (so that a
missing value goes where Python's `max` puts it, which `np.maximum` would not).

A rewrite is a candidate, never a claim: Python and NumPy differ on missing values, integer
overflow and Python-only operations, and the run's output is compared with the baseline's
before anything is verified. A construct the rewriter cannot express is named in `Unsupported`.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from typing import Optional, Union

STRING_METHODS = {
    "upper", "lower", "strip", "lstrip", "rstrip", "title", "capitalize", "casefold", "swapcase", "startswith",
    "endswith", "replace", "zfill", "center", "ljust", "rjust", "find", "rfind", "count", "isdigit", "isalpha",
    "isalnum", "isspace", "islower", "isupper", "isnumeric", "isdecimal", "istitle", "split", "rsplit",
}
DATETIME_FIELDS = {"year", "month", "day", "hour", "minute", "second", "microsecond", "nanosecond", "dayofweek",
                   "day_of_week", "dayofyear", "day_of_year", "quarter", "is_month_start", "is_month_end"}
DATETIME_METHODS = {"weekday", "strftime", "month_name", "day_name", "normalize", "date", "time"}
NUMPY_OF_MATH = {"sqrt", "exp", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "floor", "ceil", "fabs"}
CAST = {"float": "float", "int": "int", "bool": "bool", "str": "str"}

Function = Union[ast.FunctionDef, ast.Lambda]


class Unsupported(Exception):
    """A construct the rewriter cannot express over columns (the message names it)."""


@dataclass(frozen=True)
class Rewrite:
    name: str  # the user's function (or "<lambda>")
    mode: str  # "row": f(row) over a frame | "value": f(x) over a series
    original: str  # the user's source of the function
    text: str  # the rewritten function, `def <name>_columns(frame_or_values): ...`

    @property
    def columns_name(self) -> str:
        return f"{'lambda' if self.name == '<lambda>' else self.name}_columns"

    def diff(self, where: str = "") -> str:
        return "".join(difflib.unified_diff(self.original.splitlines(True), self.text.splitlines(True),
                                            f"{where or self.name} (yours)", f"{self.columns_name} (advisor's)"))


def function_at(source: str, line: int) -> Optional[Function]:
    """The innermost function (def or lambda) in `source` that starts on `line`, else contains it."""
    found = None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.Lambda)) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if found is None or node.lineno >= found.lineno:
                found = node
    return found


def rewrite(function: Function, source: str, mode: str) -> Rewrite:
    """The function over whole columns; raises Unsupported naming the construct it cannot rewrite."""
    args = function.args
    if len(args.args) != 1 or args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise Unsupported("a function of more than its one row or value")
    argument = args.args[0].arg
    columns = _Columns(argument, mode)
    if isinstance(function, ast.Lambda):
        body = [ast.Return(columns.expression(function.body))]
        name = "<lambda>"
    else:
        body = columns.block(_without_docstring(function.body))
        name = function.name
    parameter = "frame" if mode == "row" else "values"
    rewritten = ast.FunctionDef(name=f"{'lambda' if name == '<lambda>' else name}_columns",
                                args=ast.arguments(posonlyargs=[], args=[ast.arg(parameter)], kwonlyargs=[], kw_defaults=[],
                                                   defaults=[]),
                                body=body, decorator_list=[], returns=None, type_params=[])
    text = ast.unparse(ast.fix_missing_locations(ast.Module([rewritten], []))) + "\n"
    original = ast.get_source_segment(source, function) or ast.unparse(function)
    if isinstance(function, ast.FunctionDef):
        original = "\n".join(source.splitlines()[function.lineno - 1:function.end_lineno]) + "\n"
    return Rewrite(name, mode, original if original.endswith("\n") else original + "\n", text)


# ---------------------------------------------------------------- loops that build a column

LOOPS = ("itertuples", "iterrows")


def column_loops(function: ast.FunctionDef) -> list[ast.For]:
    """The loops at the top of `function` over `X.itertuples()` or `X.iterrows()`."""
    return [s for s in function.body if isinstance(s, ast.For) and isinstance(s.iter, ast.Call)
            and isinstance(s.iter.func, ast.Attribute) and s.iter.func.attr in LOOPS]


def rewrite_loops(function: ast.FunctionDef, source: str, lines: set[int]) -> str:
    """`function` (the user's transform) with each loop starting on one of `lines` replaced by its
    column form: a helper computing the values over whole columns, and one `extend` of the list
    the loop appended to. Raises Unsupported naming what a loop does that cannot be rewritten."""
    body = []
    for statement in function.body:
        body += rewrite_loop(statement) if isinstance(statement, ast.For) and statement.lineno in lines else [statement]
    changed = ast.FunctionDef(function.name, function.args, body, function.decorator_list, function.returns,
                              type_params=getattr(function, "type_params", []))
    return ast.unparse(ast.fix_missing_locations(ast.Module([changed], []))) + "\n"


def rewrite_loop(loop: ast.For) -> list[ast.stmt]:
    if loop.orelse:
        raise Unsupported("a loop with an else clause")
    method = loop.iter.func.attr
    if loop.iter.args or loop.iter.keywords:
        raise Unsupported(f"{method}() with arguments")
    target = loop.target
    if method == "iterrows":
        if not (isinstance(target, ast.Tuple) and len(target.elts) == 2 and all(isinstance(e, ast.Name) for e in target.elts)):
            raise Unsupported("an iterrows loop not written `for index, row in ...`")
        hidden, row = frozenset({target.elts[0].id}), target.elts[1].id
    elif isinstance(target, ast.Name):
        hidden, row = frozenset(), target.id
    else:
        raise Unsupported("an itertuples loop that unpacks its rows")
    collected: set[str] = set()
    returns = _appends_as_returns(loop.body, collected)
    if len(collected) != 1:
        raise Unsupported("a loop that builds more than one list" if collected else "a loop that builds no list")
    helper = f"loop_{loop.lineno}_columns"
    definition = ast.FunctionDef(helper, ast.arguments(posonlyargs=[], args=[ast.arg("frame")], kwonlyargs=[], kw_defaults=[],
                                                       defaults=[]),
                                 _Columns(row, "row", hidden).block(returns), [], None, type_params=[])
    frame = loop.iter.func.value
    values = _call("pd.Series", ast.Call(ast.Name(helper, ast.Load()), [frame], []),
                   index=ast.Attribute(frame, "index", ast.Load()))
    extend = _method(ast.Name(collected.pop(), ast.Load()), "extend", _method(values, "tolist"))
    return [definition, ast.Expr(extend)]


def _appends_as_returns(statements: list, collected: set[str]) -> list:
    """A loop body whose every path ends in one `values.append(x)`, as a function body returning x."""
    out = []
    for index, statement in enumerate(statements):
        call = statement.value if isinstance(statement, ast.Expr) else None
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append"
                and isinstance(call.func.value, ast.Name) and len(call.args) == 1):
            if index != len(statements) - 1:
                raise Unsupported("statements after the append in a loop")
            collected.add(call.func.value.id)
            out.append(ast.Return(call.args[0]))
        elif isinstance(statement, ast.If):
            out.append(ast.If(statement.test, _appends_as_returns(statement.body, collected),
                              _appends_as_returns(statement.orelse, collected) if statement.orelse else []))
        elif isinstance(statement, ast.Assign):
            out.append(statement)
        else:
            raise Unsupported(f"a statement of kind {type(statement).__name__} in the loop ({_first_line(statement)})")
    return out


def _without_docstring(body: list) -> list:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def _name(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def _call(function: str, *args: ast.expr, **keywords: ast.expr) -> ast.Call:
    return ast.Call(_name(function), list(args), [ast.keyword(k, v) for k, v in keywords.items()])


def _method(value: ast.expr, path: str, *args: ast.expr, keywords=()) -> ast.Call:
    target = value
    for part in path.split("."):
        target = ast.Attribute(target, part, ast.Load())
    return ast.Call(target, list(args), list(keywords))


class _Columns:
    """Rewrites one function's statements and expressions; tracks which names hold columns."""

    def __init__(self, argument: str, mode: str, hidden: frozenset = frozenset()):
        self.argument, self.mode, self.hidden = argument, mode, hidden  # hidden: names a loop gives per row
        self.vectors: set[str] = set() if mode == "row" else {argument}
        self.locals: set[str] = set()
        self.frame = "frame" if mode == "row" else "values"

    # ------------------------------------------------------------ statements

    def block(self, statements: list) -> list:
        """Assignments to locals, then a return (or an if/elif/else chain of returns)."""
        out = []
        for index, statement in enumerate(statements):
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
                target = statement.targets[0].id
                value, vector = self.typed(statement.value)
                if target == self.argument:
                    raise Unsupported("an assignment to the row itself")
                self.locals.add(target)
                (self.vectors.add if vector else self.vectors.discard)(target)
                out.append(ast.Assign([ast.Name(target, ast.Store())], value))
            elif isinstance(statement, ast.Return):
                if statement.value is None:
                    raise Unsupported("a bare return")
                out.append(ast.Return(self.expression(statement.value)))
                return out
            elif isinstance(statement, ast.If):
                out.append(ast.Return(self.chain(statement, statements[index + 1:])))
                return out
            else:
                raise Unsupported(f"a statement of kind {type(statement).__name__} ({_first_line(statement)})")
        raise Unsupported("a path through the function that returns nothing")

    def chain(self, statement: ast.If, rest: list) -> ast.expr:
        """`if a: return x / elif b: return y / else: return z` (or the statements after the if,
        when the if returns) -> np.select([a, b], [x, y], z), or np.where for one condition."""
        conditions, choices = [], []
        node: Optional[ast.If] = statement
        fallback: list = rest
        while node is not None:
            conditions.append(self.truth(node.test))
            choices.append(self.branch(node.body))
            if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                node = node.orelse[0]
            else:
                fallback = node.orelse or rest
                node = None
        default = self.branch(fallback)
        if len(conditions) == 1:
            return _call("np.where", conditions[0], choices[0], default)
        return _call("np.select", ast.List(conditions, ast.Load()), ast.List(choices, ast.Load()), default=default)

    def branch(self, statements: list) -> ast.expr:
        statements = [s for s in statements if not isinstance(s, ast.Pass)]
        if len(statements) == 1 and isinstance(statements[0], ast.Return) and statements[0].value is not None:
            return self.expression(statements[0].value)
        if statements and isinstance(statements[0], ast.If):
            return self.chain(statements[0], statements[1:])
        if not statements:
            raise Unsupported("a branch that returns nothing")
        raise Unsupported(f"a branch with more than a return ({_first_line(statements[0])})")

    # ------------------------------------------------------------ expressions

    def expression(self, node: ast.expr) -> ast.expr:
        return self.typed(node)[0]

    def truth(self, node: ast.expr) -> ast.expr:
        """A condition over columns: a bare column's truth is Python's (a missing value is true)."""
        value, vector = self.typed(node)
        if vector and not isinstance(node, (ast.Compare, ast.BoolOp, ast.UnaryOp)) and not _is_predicate(node):
            return _method(value, "astype", ast.Constant("bool"))
        return value

    def typed(self, node: ast.expr) -> tuple[ast.expr, bool]:
        """The rewritten expression and whether it holds a column (rather than one scalar)."""
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise Unsupported(f"the construct {type(node).__name__} ({ast.unparse(node)})")
        return method(node)

    def _Constant(self, node):
        return node, False

    def _Name(self, node):
        if node.id in self.hidden:
            raise Unsupported(f"the row's index ({node.id})")
        if node.id == self.argument:
            if self.mode == "row":
                raise Unsupported(f"the whole row used as a value ({self.argument})")
            return ast.Name(self.frame, ast.Load()), True
        return node, node.id in self.vectors

    def _Tuple(self, node):
        parts = [self.typed(e) for e in node.elts]
        if any(v for _, v in parts):
            raise Unsupported(f"a tuple of row values ({ast.unparse(node)})")
        return node, False

    _List = _Tuple

    def _Subscript(self, node):
        if self.mode == "row" and isinstance(node.value, ast.Name) and node.value.id == self.argument:
            if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
                raise Unsupported(f"a row value read by position ({ast.unparse(node)})")
            return ast.Subscript(ast.Name("frame", ast.Load()), node.slice, ast.Load()), True
        value, vector = self.typed(node.value)
        key, key_vector = self.typed(node.slice)
        if key_vector and not vector:  # CONSTANT[column]: a lookup per row, as a map
            return _method(key, "map", value), True
        if vector:
            if isinstance(node.slice, ast.Slice) or not key_vector:
                return ast.Subscript(ast.Attribute(value, "str", ast.Load()), key, ast.Load()), True
            raise Unsupported(f"a column indexed by a column ({ast.unparse(node)})")
        return ast.Subscript(value, key, ast.Load()), False

    def _Slice(self, node):
        parts = [self.typed(p) if p is not None else (None, False) for p in (node.lower, node.upper, node.step)]
        if any(v for _, v in parts):
            raise Unsupported(f"a slice bounded by row values ({ast.unparse(node)})")
        return node, False

    def _Attribute(self, node):
        if self.mode == "row" and isinstance(node.value, ast.Name) and node.value.id == self.argument:
            if node.attr == "Index":
                raise Unsupported(f"the row's index ({ast.unparse(node)})")
            return ast.Subscript(ast.Name("frame", ast.Load()), ast.Constant(node.attr), ast.Load()), True
        value, vector = self.typed(node.value)
        if not vector:
            return ast.Attribute(value, node.attr, ast.Load()), False
        if node.attr in DATETIME_FIELDS:
            return ast.Attribute(ast.Attribute(value, "dt", ast.Load()), node.attr, ast.Load()), True
        raise Unsupported(f"the attribute .{node.attr} of a row value")

    def _BinOp(self, node):
        left, lv = self.typed(node.left)
        right, rv = self.typed(node.right)
        return ast.BinOp(left, node.op, right), lv or rv

    def _UnaryOp(self, node):
        operand, vector = self.typed(node.operand)
        if isinstance(node.op, ast.Not) and vector:
            return ast.UnaryOp(ast.Invert(), self.truth(node.operand)), True
        return ast.UnaryOp(node.op, operand), vector

    def _BoolOp(self, node):
        parts = [self.typed(v) for v in node.values]
        if not any(v for _, v in parts):
            return ast.BoolOp(node.op, [p for p, _ in parts]), False
        op = ast.BitAnd() if isinstance(node.op, ast.And) else ast.BitOr()
        result = self.truth(node.values[0])
        for value in node.values[1:]:
            result = ast.BinOp(result, op, self.truth(value))
        return result, True

    def _Compare(self, node):
        operands = [self.typed(node.left)] + [self.typed(c) for c in node.comparators]
        vector = any(v for _, v in operands)
        if not vector:
            return ast.Compare(operands[0][0], node.ops, [o for o, _ in operands[1:]]), False
        parts = []
        for (left, _), op, (right, right_vector) in zip(operands, node.ops, operands[1:]):
            if isinstance(op, (ast.In, ast.NotIn)):
                if right_vector:
                    raise Unsupported(f"membership in a row value ({ast.unparse(node)})")
                values = ast.List(list(right.elts), ast.Load()) if isinstance(right, (ast.Tuple, ast.List, ast.Set)) \
                    else _call("list", right)
                test = _method(left, "isin", values)
                parts.append(ast.UnaryOp(ast.Invert(), test) if isinstance(op, ast.NotIn) else test)
            elif isinstance(op, (ast.Is, ast.IsNot)):
                raise Unsupported(f"an identity test ({ast.unparse(node)})")
            else:
                parts.append(ast.Compare(left, [op], [right]))
        result = parts[0]
        for part in parts[1:]:
            result = ast.BinOp(result, ast.BitAnd(), part)
        return result, True

    def _IfExp(self, node):
        test, test_vector = self.typed(node.test)
        body, bv = self.typed(node.body)
        orelse, ov = self.typed(node.orelse)
        if not test_vector:
            return ast.IfExp(test, body, orelse), bv or ov
        return _call("np.where", self.truth(node.test), body, orelse), True

    def _Call(self, node):
        if node.keywords and not isinstance(node.func, ast.Attribute):
            raise Unsupported(f"a call with keywords ({ast.unparse(node)})")
        args = [self.typed(a) for a in node.args]
        vector = any(v for _, v in args)
        values = [a for a, _ in args]
        if isinstance(node.func, ast.Attribute):
            return self._method_call(node, values, vector)
        if not isinstance(node.func, ast.Name):
            raise Unsupported(f"a call of a computed function ({ast.unparse(node)})")
        name = node.func.id
        if not vector:
            return ast.Call(node.func, values, []), False
        if name in ("max", "min") and len(values) == 2:
            # Python's max(a, b) is a unless b > a: kept exactly, missing values included
            a, b = values
            beats = ast.Compare(b, [ast.Gt() if name == "max" else ast.Lt()], [a])
            return _call("np.where", beats, b, a), True
        if name == "abs" and len(values) == 1:
            return _call("np.abs", values[0]), True
        if name == "round" and len(values) in (1, 2):
            return _method(values[0], "round", *values[1:]), True
        if name == "len" and len(values) == 1:
            return _method(values[0], "str.len"), True
        if name in CAST and len(values) == 1:
            return _method(values[0], "astype", ast.Constant(CAST[name])), True
        raise Unsupported(f"a call to {name}() per row ({ast.unparse(node)})")

    def _method_call(self, node: ast.Call, values: list, args_vector: bool):
        receiver, vector = self.typed(node.func.value)
        attr = node.func.attr
        keywords = [ast.keyword(k.arg, self._scalar(k.value)) for k in node.keywords]
        if isinstance(node.func.value, ast.Name) and node.func.value.id == "math" and attr in NUMPY_OF_MATH:
            return _call(f"np.{attr}", *values), args_vector
        if not vector:
            if attr == "get" and args_vector and len(values) in (1, 2) and not node.keywords:
                key = values[0]  # CONSTANT.get(column, default): a map, the default where the key is absent
                default = values[1] if len(values) == 2 else ast.Constant(None)
                mapped = _method(key, "map", receiver)
                return _method(mapped, "where", _method(key, "isin", _call("list", receiver)), default), True
            if args_vector:
                raise Unsupported(f"a call of .{attr}() with row values ({ast.unparse(node)})")
            return ast.Call(ast.Attribute(receiver, attr, ast.Load()), values, keywords), False
        if args_vector:
            raise Unsupported(f"a method of a row value taking row values ({ast.unparse(node)})")
        if attr in STRING_METHODS:
            return _method(receiver, f"str.{attr}", *values, keywords=keywords), True
        if attr in DATETIME_METHODS:
            return _method(receiver, f"dt.{attr}", *values, keywords=keywords), True
        raise Unsupported(f"the method .{attr}() of a row value")

    def _scalar(self, node: ast.expr) -> ast.expr:
        value, vector = self.typed(node)
        if vector:
            raise Unsupported(f"a keyword argument taken from the row ({ast.unparse(node)})")
        return value


def _is_predicate(node: ast.expr) -> bool:
    """A call whose result is already true or false per row: str predicates, isin."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and (node.func.attr.startswith("is") or node.func.attr in ("startswith", "endswith")))


def _first_line(node: ast.AST) -> str:
    return ast.unparse(node).splitlines()[0][:60]
