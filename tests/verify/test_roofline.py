"""The roofline rung's arithmetic on the CPU (verify/roofline.py: roofline): the floor is the larger of the compute
and the memory time (a kernel can beat neither), it names the bound that sets it, and every percentage is
achieved over peak, checked by hand and as properties."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from pipelink.verify.roofline import roofline

PEAKS = {"bf16_flops_per_s": 1e15, "copy_bytes_per_s": 4e12, "read_bytes_per_s": 5e12}


def test_a_compute_bound_kernel_by_hand():
    # 2e12 FLOP at 1e15/s: 2 ms; 4e9 bytes at 4e12/s: 1 ms; timed at 4 ms
    r = roofline(2e12, 4e9, 4.0, PEAKS, read_bytes=2.5e9)
    assert r["bound"] == "compute" and math.isclose(r["floor_ms"], 2.0)
    assert math.isclose(r["pct_of_roofline"], 50.0)
    assert math.isclose(r["pct_of_bf16_peak"], 50.0) and math.isclose(r["pct_of_copy_bandwidth"], 25.0)
    assert math.isclose(r["pct_of_read_bandwidth"], 12.5)  # 2.5e9 bytes in 4 ms against 5e12/s
    assert math.isclose(r["intensity_flop_per_byte"], 500.0) and math.isclose(r["achieved_flops_per_s"], 5e14)


def test_a_memory_bound_kernel_by_hand():
    r = roofline(1e9, 8e9, 2.5, PEAKS, read_bytes=8e9)  # 0.001 ms of compute, 2 ms of memory
    assert r["bound"] == "memory" and math.isclose(r["floor_ms"], 2.0) and math.isclose(r["pct_of_roofline"], 80.0)


@given(st.floats(min_value=1e6, max_value=1e16), st.floats(min_value=1e3, max_value=1e12),
       st.floats(min_value=1e-3, max_value=1e3))
def test_the_floor_is_never_below_either_bound(flops, nbytes, ms):
    r = roofline(flops, nbytes, ms, PEAKS, read_bytes=nbytes)
    compute_ms, memory_ms = 1e3 * flops / PEAKS["bf16_flops_per_s"], 1e3 * nbytes / PEAKS["copy_bytes_per_s"]
    assert r["floor_ms"] >= compute_ms * (1 - 1e-12) and r["floor_ms"] >= memory_ms * (1 - 1e-12)
    assert math.isclose(r["floor_ms"], max(compute_ms, memory_ms))
    assert r["bound"] == ("memory" if memory_ms >= compute_ms else "compute")
    assert math.isclose(r["pct_of_roofline"], 100 * r["floor_ms"] / ms)
    if ms >= r["floor_ms"]:  # a kernel no faster than its floor is at most 100 % of it
        assert r["pct_of_roofline"] <= 100 * (1 + 1e-12)
