"""The correctness rung's judging on the CPU (verify/metrics.py), on numpy arrays as the child has them on the
GPU: the poison every output starts as, for each element type a contract allows, and the unwritten count it
gives, a reference of zero where the kernel never wrote included; the tolerance (a spec's 0 means exact); the
non-finite and mismatch counts, by hand and as properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelink.contract import DTYPES
from pipelink.verify import metrics
from pipelink.verify.metrics import compare, judge, poison_value, tolerance
from pipelink.verify_terms import TOLERANCES

# The host stand-in of each element type: torch's storage for the integers (runtime.TORCH_DTYPES), float32 for
# the floating types (numpy has no bf16 or fp8: the child compares in float64 whatever the type, and NaN, the
# poison, exists in every one of them).
HOST = {"int32": np.int32, "int8": np.int8, "uint8": np.uint8}


def _host(dtype: str):
    return HOST.get(dtype, np.float32)


def _reference(dtype: str, n: int) -> np.ndarray:
    """Values the type can hold, none of them the poison, zero over the second half (where the kernel below never
    writes: a zero reference must not hide an unwritten element)."""
    rng = np.random.default_rng(7)
    if dtype in HOST:
        info = np.iinfo(HOST[dtype])
        values = rng.integers(max(info.min + 1, -100), min(info.max - 1, 100), n)
    else:
        values = rng.standard_normal(n)
    ref = values.astype(_host(dtype)).astype(np.float64)
    ref[n // 2:] = 0
    return ref


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_an_output_the_kernel_half_wrote_counts_the_other_half_unwritten(dtype):
    n = 64
    poison = poison_value(dtype)
    ref = _reference(dtype, n)
    out = np.full(n, poison, dtype=_host(dtype))
    assert (math.isnan(out[0]) if math.isnan(poison) else out[0] == poison)  # the type holds its poison
    out[: n // 2] = ref[: n // 2]  # the kernel wrote the first half, exactly
    m = compare(out, ref, dtype, poison)
    assert m.unwritten == n // 2 and m.nonfinite == 0
    ok, why = judge(m, dtype)
    assert not ok and f"{n // 2} of {n} elements never written" in why[0]
    out[n // 2:] = 0  # now it wrote the rest too: zeros, as the reference is there
    m = compare(out, ref, dtype, poison)
    assert m.unwritten == 0 and judge(m, dtype) == (True, [])


def test_poison_is_nan_for_every_floating_type_and_a_sentinel_for_integers():
    for dtype in DTYPES:
        poison = poison_value(dtype)
        if dtype in HOST:
            info = np.iinfo(HOST[dtype])
            assert poison in (info.min, info.max) and poison != 0
        else:
            assert math.isnan(poison)
    with pytest.raises(ValueError):
        poison_value("fp64")


def test_an_integer_output_that_holds_the_poison_where_the_reference_does_is_written():
    poison = poison_value("int8")
    ref = np.array([poison, 1, 2, 3], dtype=np.float64)
    out = np.array([poison, 1, 2, poison], dtype=np.int8)
    m = compare(out, ref, "int8", poison)
    assert m.unwritten == 1  # the last: the first holds the poison because the reference does
    assert compare(out, ref, "int8").unwritten == 0  # a readwrite operand (no poison): only NaN counts


def test_nan_the_kernel_wrote_or_left_is_unwritten_and_inf_is_nonfinite():
    ref = np.array([1.0, 2.0, 3.0, np.nan, 5.0])
    out = np.array([np.nan, np.inf, 3.0, 7.0, -np.inf])
    m = compare(out, ref, "fp32", poison_value("fp32"))
    assert (m.unwritten, m.nonfinite, m.elements) == (1, 2, 5)  # the reference's own NaN excuses element 3


def test_a_tolerance_of_zero_means_exact():
    assert tolerance("bf16", 0.0) == 0.0 and tolerance("bf16", None) == TOLERANCES["bf16"][0]
    assert tolerance("fp32", 0.25) == 0.25
    ref = np.linspace(1, 2, 1000)
    off = ref.copy()
    off[3] = np.nextafter(off[3], 3)  # one element one unit in the last place off
    assert judge(compare(off, ref, "fp32"), "fp32")[0]  # within fp32's default
    ok, why = judge(compare(off, ref, "fp32"), "fp32", rel_l2_tol=0.0)
    assert not ok and "relative L2 error" in why[0]
    assert judge(compare(ref.copy(), ref, "fp32"), "fp32", rel_l2_tol=0.0) == (True, [])


def test_counts_by_hand():
    ref = np.array([1.0, -2.0, 0.0, 4.0])
    out = np.array([1.0, -2.0, 0.5, 8.0])
    m = compare(out, ref, "fp32")
    assert m.mismatched == 2 and m.worst_index == 3 and (m.worst_out, m.worst_ref) == (8.0, 4.0)
    assert math.isclose(m.rel_l2, math.sqrt(0.25 + 16) / math.sqrt(1 + 4 + 16))
    assert math.isclose(m.max_abs_err, 4.0) and m.unwritten == 0 and not m.all_zero_vs_nonzero
    assert compare(np.zeros(4), ref, "fp32").all_zero_vs_nonzero


@given(st.integers(1, 200), st.data())
def test_the_unwritten_count_is_the_elements_left_at_the_poison(n, data):
    written = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    ref = np.zeros(n)  # the hardest case: a kernel that writes nothing would be right if the poison were 0
    out = np.where(written, 0.0, poison_value("bf16"))
    m = compare(out, ref, "bf16", poison_value("bf16"))
    assert m.unwritten == int((~written).sum())
    assert judge(m, "bf16")[0] == bool(written.all())


def test_the_child_poisons_with_poison_value():
    # The verify child fills each output with metrics.poison_value (Kernel.outputs) and hands that value to
    # compare; a kernel file's outputs (CallableKernel) get the same (pykernel._poison).
    from pipelink.verify import child, pykernel
    import inspect
    assert "metrics.poison_value(p.dtype)" in inspect.getsource(child.Kernel.outputs)
    assert "poison_value" in inspect.getsource(pykernel._poison)
    assert metrics.INT_POISON.keys() >= {d for d in DTYPES if d in HOST}
