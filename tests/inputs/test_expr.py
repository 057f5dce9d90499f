import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelink.errors import ExpressionError
from pipelink.expr import Expr


def test_arithmetic_and_functions():
    e = Expr.parse("stages * tile_rows * tile_cols * 4 + align_up(x, 128) - ceil_div(7, 2) + max(a, 3) % 5")
    assert e.names() == {"stages", "tile_rows", "tile_cols", "x", "a"}
    assert e.eval({"stages": 4, "tile_rows": 128, "tile_cols": 64, "x": 130, "a": 9}) == 131072 + 256 - 4 + 4


def test_exact_division_is_checked():
    assert Expr.parse("M / 128").eval({"M": 1024}) == 8
    with pytest.raises(ExpressionError, match="does not divide exactly"):
        Expr.parse("M / 128").eval({"M": 1000})
    assert Expr.parse("M // 128").eval({"M": 1000}) == 7


@pytest.mark.parametrize("text", ["__import__('os')", "a.b", "x ** 2", "1.5", "[1]", "f(1)", "f(1, 2)",
                                  "__import__('os', 'sys')", "a if b else c",
                                  "lambda: 1", "x < 3", "min(t)", "max()", "ceil_div(t)", "align_up(t, 2, 3)"])
def test_unsafe_or_unsupported_syntax_is_refused(text):
    with pytest.raises(ExpressionError):
        Expr.parse(text)


def test_unknown_name_says_which_and_lists_known():
    with pytest.raises(ExpressionError) as info:
        Expr.parse("stages * tile").eval({"stages": 2}, where="smem[0].bytes")
    assert "'tile'" in str(info.value) and "stages" in str(info.value) and "smem[0].bytes" in str(info.value)


def test_to_c_substitutes_names():
    e = Expr.parse("t // tile_cols + (threads // tile_cols) * v")
    c = e.to_c({"tile_cols": "64", "threads": "256", "t": "pl_t"})
    assert c == "((pl_t / 64) + ((256 / 64) * v))"
    for t in range(256):
        for v in range(4):
            assert eval(c.replace("pl_t", str(t)).replace("v", str(v)).replace("/", "//")) == e.eval(
                {"t": t, "v": v, "tile_cols": 64, "threads": 256})


# --- evaluation over index arrays (port offsets and fragments, at link time) -------------------------

C_INT = range(-2 ** 31, 2 ** 31)
INDEX = np.arange(4)
POINTS = range(4)  # INDEX one at a time, as Python ints


def test_a_huge_partial_result_over_arrays_is_a_typed_error_not_an_overflow():
    """The issue's port offset: each product is exact in Python, and too big for an int64 array."""
    e = Expr.parse("t + 2147483647 * 2147483647 * 2147483647")
    with pytest.raises(ExpressionError) as info:
        e.eval_array({"t": INDEX}, where="port[0].offset")
    assert info.value.field == "port[0].offset" and "2147483647 * 2147483647 = 4611686014132420609 is over the " \
        "C int limit 2147483647" in info.value.message and "32-bit C int" in info.value.hint


@settings(max_examples=300, deadline=None)
@given(a=st.integers(-2 ** 31, 2 ** 31 - 1), b=st.integers(-2 ** 31, 2 ** 31 - 1), c=st.integers(-2 ** 31, 2 ** 31 - 1))
def test_array_evaluation_is_exact_or_refused_at_the_c_int_boundary(a, b, c):
    """The glue computes a layout in C int, so each partial result at each index must be one: inside,
    the array holds the exact (Python) value at every index; outside anywhere, it is refused, never
    wrapped (t * a * b reaches 3 * 2**62, past int64)."""
    e, facts = Expr.parse("t * a * b - c"), {"a": a, "b": b, "c": c}
    partials = [x for t in POINTS for x in (t * a, t * a * b, t * a * b - c)]
    if all(x in C_INT for x in partials):
        assert e.eval_array({**facts, "t": INDEX}).tolist() == [e.eval({**facts, "t": t}) for t in POINTS]
    else:
        with pytest.raises(ExpressionError, match="C int limit"):
            e.eval_array({**facts, "t": INDEX})


@settings(max_examples=200, deadline=None)
@given(divisors=st.lists(st.integers(-3, 3), min_size=1, max_size=6), op=st.sampled_from(
    ["ceil_div(7, d)", "align_up(7, d)", "7 // d", "7 % d", "ceil_div(d, d)", "align_up(d * 4, d)"]))
def test_every_divisor_over_arrays_is_checked_for_zero(divisors, op):
    """ceil_div and align_up divide as // does: a zero divisor at any index refuses the expression."""
    e, d = Expr.parse(op), np.array(divisors)
    if 0 in divisors:
        with pytest.raises(ExpressionError, match="division by zero"):
            e.eval_array({"d": d})
    else:
        assert e.eval_array({"d": d}).tolist() == [e.eval({"d": x}) for x in divisors]
