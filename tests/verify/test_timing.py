"""The bench rung's arithmetic on the CPU (verify/timing.py: summarize, speedup), by hand and as properties: the
median is the middle launch (one slow launch does not move it), the percentiles are numpy's linear ones, and a
speed-up is baseline / kernel (a slower kernel never gets one above 1)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from pipelink.verify.timing import speedup, summarize

TIMES = st.lists(st.floats(min_value=1e-3, max_value=1e3, allow_nan=False), min_size=1, max_size=60)


def test_summary_by_hand():
    s = summarize([4.0, 1.0, 100.0, 2.0, 3.0])
    assert s["median_ms"] == 3.0  # the mean would be 22
    assert math.isclose(s["p10_ms"], 1.4) and math.isclose(s["p90_ms"], 61.6)  # 1 + 0.4 (2 - 1); 4 + 0.6 (100 - 4)
    assert (s["min_ms"], s["max_ms"], s["runs"]) == (1.0, 100.0, 5)
    assert s["times_ms"] == [4.0, 1.0, 100.0, 2.0, 3.0]  # as timed, in order
    assert summarize([1.0, 2.0, 3.0, 10.0])["median_ms"] == 2.5  # an even count: the middle two's mean


@given(TIMES, st.floats(min_value=1e4, max_value=1e9))
def test_one_slow_launch_does_not_move_the_median_past_its_neighbours(times, slow):
    ordered = sorted(times)
    s = summarize([*times, slow])
    n = len(ordered)
    # with one more launch above them all, the median is between the old middle and the next one up
    assert ordered[(n - 1) // 2] <= s["median_ms"] <= ordered[min(n // 2 + 1, n - 1)] or n == 1
    assert s["p10_ms"] <= s["median_ms"] <= s["p90_ms"] and s["min_ms"] <= s["p10_ms"] and s["p90_ms"] <= slow


def test_speedup_by_hand():
    assert speedup(2.0, 1.0) == 2.0  # the kernel takes half the baseline's time: twice as fast
    assert speedup(1.0, 4.0) == 0.25


@given(st.floats(min_value=1e-4, max_value=1e4), st.floats(min_value=1e-4, max_value=1e4))
def test_a_slower_kernel_never_gets_a_speedup_above_one(baseline, kernel):
    s = speedup(baseline, kernel)
    assert (s > 1) == (kernel < baseline) and (s < 1) == (kernel > baseline)
    assert math.isclose(s * speedup(kernel, baseline), 1.0)
