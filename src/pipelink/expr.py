"""Safe integer expressions over facts, e.g. ``"stages * tile_rows * tile_cols * 4"``.

Contracts size buffers, count arrivals and describe layouts with these. They are parsed with
``ast`` and walked by hand: only integer literals, names, + - * // / % (``/`` must divide
exactly), unary minus, parentheses and the functions below are accepted. Nothing is ever
passed to ``eval``. Text, depth and literals are bounded before anything recursive walks the
tree, and the text is one line of plain ASCII, so it can be pasted into generated code.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .errors import ExpressionError, show


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _align_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


FUNCTIONS = {"min": min, "max": max, "ceil_div": _ceil_div, "align_up": _align_up}
# These divide by their second argument, as // does; min and max take two or more arguments.
_DIVIDING = ("ceil_div", "align_up")
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Div, ast.Mod)
_HINT = "use integers, fact names, + - * / // %, min, max, ceil_div, align_up"
# Far above any real contract's expression (the longest bundled one is under 100 characters), and
# low enough that parsing and the recursive walks below stay well inside Python's recursion limit.
MAX_CHARS = 1000
MAX_DEPTH = 64
# Literals are pasted into the glue's C int arithmetic.
MAX_LITERAL = 2 ** 31 - 1
MIN_C_INT = -MAX_LITERAL - 1
_CHARS = re.compile(r"[A-Za-z0-9_ +\-*/%(),]*")


@dataclass(frozen=True)
class Expr:
    """A parsed expression. ``text`` is what the user wrote (or the literal as text)."""

    text: str
    tree: ast.expr = field(compare=False, repr=False)

    @staticmethod
    def parse(value: int | str, *, where: str = "") -> "Expr":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ExpressionError(f"expected an integer or an expression string, got {show(value)}",
                                  field=where or None)
        if isinstance(value, int) and not -MAX_LITERAL <= value <= MAX_LITERAL:  # before str(): 4300+ digits raise
            raise ExpressionError(f"integer {show(value)} is outside the 32-bit range ±{MAX_LITERAL}",
                                  field=where or None, hint="the generated code computes with C int")
        text = str(value)
        if len(text) > MAX_CHARS:
            raise ExpressionError(f"expression is {len(text)} characters long, over the limit of {MAX_CHARS} by "
                                  f"{len(text) - MAX_CHARS}", field=where or None, hint="name a part of it as a fact")
        if not _CHARS.fullmatch(text):
            bad = next(ch for ch in text if not _CHARS.fullmatch(ch))
            raise ExpressionError(f"character {bad!r} is not allowed in expression {show(text)}",
                                  field=where or None, hint=_HINT + ", spaces, on one line")
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError as exc:
            raise ExpressionError(f"cannot parse expression {show(text)}: {exc.msg}", field=where or None,
                                  hint=_HINT) from None
        depth = _depth(tree)
        if depth > MAX_DEPTH:
            raise ExpressionError(f"expression {show(text)} nests {depth} deep, over the limit of {MAX_DEPTH} "
                                  f"by {depth - MAX_DEPTH}", field=where or None, hint="name a part of it as a fact")
        _validate(tree, text, where)
        return Expr(text, tree)

    def names(self) -> set[str]:
        return {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id not in FUNCTIONS}

    def eval(self, env: Mapping[str, int], *, where: str = "") -> int:
        """The exact value (Python ints); the caller holds it to its field's limits."""
        return _eval(self.tree, env, self.text, where, c_int=False)

    def eval_array(self, env: Mapping[str, "int | np.ndarray"], *, where: str = "") -> np.ndarray:
        """Elementwise evaluation over integer arrays (layouts are compared at every index at once).
        The glue computes these expressions in C int at run time (``to_c``), so every partial result,
        at every index, is held to the C int range, as a fact's value is: one outside is refused.
        That also keeps the int64 arrays exact (a sum or product of two C ints never wraps them)."""
        return np.asarray(_eval(self.tree, env, self.text, where, c_int=True))

    def to_c(self, rename: Mapping[str, str] | None = None) -> str:
        """C source for the expression (for generated glue); names map through ``rename``."""
        return _to_c(self.tree, rename or {})

    def __str__(self) -> str:
        return self.text


def _depth(tree: ast.AST) -> int:
    """Depth of the syntax tree, found without recursion (the walks below recurse)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _validate(node: ast.AST, text: str, where: str) -> None:
    def bad(what: str) -> ExpressionError:
        return ExpressionError(f"{what} is not allowed in expression {text!r}", field=where or None, hint=_HINT)

    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            raise bad(f"constant {node.value!r}")
        if node.value > MAX_LITERAL:
            raise bad(f"constant {node.value} (over the 32-bit limit {MAX_LITERAL}; the glue computes with C int)")
    elif isinstance(node, ast.Name):
        pass
    elif isinstance(node, ast.BinOp):
        if not isinstance(node.op, _BINOPS):
            raise bad(f"operator {type(node.op).__name__}")
        _validate(node.left, text, where)
        _validate(node.right, text, where)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise bad(f"operator {type(node.op).__name__}")
        _validate(node.operand, text, where)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
            raise bad("this call")
        if len(node.args) < 2 or (node.func.id in _DIVIDING and len(node.args) > 2):
            raise ExpressionError(f"{node.func.id}() with {len(node.args)} argument(s) in expression {text!r}",
                                  field=where or None, hint="min and max take two or more arguments, "
                                  "ceil_div and align_up two")
        for arg in node.args:
            _validate(arg, text, where)
    else:
        raise bad(type(node).__name__)


def _eval(node: ast.expr, env: Mapping[str, int], text: str, where: str, c_int: bool) -> int:
    """The value of ``node``; with ``c_int``, held to C int, as is every node below it."""
    value = _operate(node, env, text, where, c_int)
    if c_int:
        _check_c_int(node, value, text, where)
    return value


def _check_c_int(node: ast.expr, value: "int | np.ndarray", text: str, where: str) -> None:
    over, under = np.any(value > MAX_LITERAL), np.any(value < MIN_C_INT)
    if not (over or under):
        return
    extreme = int((value.max() if over else value.min()) if isinstance(value, np.ndarray) else value)
    limit = MAX_LITERAL if over else MIN_C_INT
    raise ExpressionError(f"in {text!r}, {ast.unparse(node)} = {show(extreme)} is {'over' if over else 'below'} "
                          f"the C int limit {limit} by {show(abs(extreme - limit))}", field=where or None,
                          hint="the glue computes this expression in 32-bit C int: keep every partial result "
                               f"within {MIN_C_INT}..{MAX_LITERAL}")


def _check_divisor(b: "int | np.ndarray", text: str, where: str) -> None:
    if np.any(b == 0):
        raise ExpressionError(f"division by zero in {text!r}", field=where or None,
                              hint="change the expression or the facts so that no divisor is 0")


def _operate(node: ast.expr, env: Mapping[str, int], text: str, where: str, c_int: bool) -> int:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            known = ", ".join(sorted(env)) or "none"
            raise ExpressionError(f"expression {text!r} uses '{node.id}', which has no value here",
                                  field=where or None, hint=f"known names: {known}")
        value = env[node.id]
        return value if isinstance(value, np.ndarray) else int(value)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env, text, where, c_int)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call):
        args = [_eval(a, env, text, where, c_int) for a in node.args]
        if node.func.id in _DIVIDING:
            _check_divisor(args[1], text, where)
        if node.func.id in ("min", "max") and any(isinstance(a, np.ndarray) for a in args):
            return (np.minimum if node.func.id == "min" else np.maximum).reduce(np.broadcast_arrays(*args))
        return FUNCTIONS[node.func.id](*args)
    assert isinstance(node, ast.BinOp)
    a = _eval(node.left, env, text, where, c_int)
    b = _eval(node.right, env, text, where, c_int)
    if isinstance(node.op, (ast.FloorDiv, ast.Div, ast.Mod)):
        _check_divisor(b, text, where)
    if isinstance(node.op, ast.Add):
        return a + b
    if isinstance(node.op, ast.Sub):
        return a - b
    if isinstance(node.op, ast.Mult):
        return a * b
    if isinstance(node.op, ast.FloorDiv):
        return a // b
    if isinstance(node.op, ast.Mod):
        return a % b
    if np.any(a % b):
        raise ExpressionError(f"in {text!r}: {a} / {b} does not divide exactly", field=where or None,
                              hint="use // for floor division or ceil_div(a, b), or change the facts so it divides")
    return a // b


_C_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/", ast.Div: "/", ast.Mod: "%"}


def _to_c(node: ast.expr, rename: Mapping[str, str]) -> str:
    # Generated glue only applies this to non-negative index arithmetic, where C's truncating
    # division equals Python's floor division.
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.Name):
        return rename.get(node.id, node.id)
    if isinstance(node, ast.UnaryOp):
        return f"(-{_to_c(node.operand, rename)})" if isinstance(node.op, ast.USub) else _to_c(node.operand, rename)
    if isinstance(node, ast.Call):
        args = [_to_c(a, rename) for a in node.args]
        name = node.func.id
        if name == "ceil_div":
            return f"(({args[0]} + {args[1]} - 1) / {args[1]})"
        if name == "align_up":
            return f"((({args[0]} + {args[1]} - 1) / {args[1]}) * {args[1]})"
        return f"{name}({', '.join(args)})"
    return f"({_to_c(node.left, rename)} {_C_OPS[type(node.op)]} {_to_c(node.right, rename)})"
