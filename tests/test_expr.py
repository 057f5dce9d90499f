import pytest

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


@pytest.mark.parametrize("text", ["__import__('os')", "a.b", "x ** 2", "1.5", "[1]", "f(1)", "a if b else c",
                                  "lambda: 1", "x < 3"])
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
