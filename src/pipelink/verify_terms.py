"""The words a link spec's [verify] section shares with the verify loop (pipelink/verify/): the
built-in rungs' names, what a user rung may be called, and the precisions with their default
tolerances. A leaf of the inputs layer (tests/repo/test_architecture.py): the spec checks its [verify]
section with them when it is loaded, and verify/ runs with them.

Where the default tolerances come from: rounding a value to a format with p stored mantissa bits
has relative error at most u = 2^-(p+1) (the unit roundoff); with rounding errors spread evenly
the relative L2 error of an output rounded once is about u/sqrt(3). The defaults allow about 5x
that for accumulation-order and input-rounding effects, and agree with the device's METHOD.md
ranges (fp32 far under 1e-3, tf32 near 3e-4, bf16 between 1e-3 and 1e-2):

  precision  p   u         u/sqrt(3)  rel_l2_tol   cosine floor
  fp32       23  6.0e-8    3.4e-8     1e-5         -
  tf32       10  4.9e-4    2.8e-4     2e-3         -
  fp16       10  4.9e-4    2.8e-4     2e-3         0.9999
  bf16        7  3.9e-3    2.3e-3     1.2e-2       0.999
  fp8e4m3     3  6.3e-2    3.6e-2     0.18         0.98
  fp8e5m2     2  1.3e-1    7.2e-2     0.36         0.93
fp32's tolerance is set by accumulation (long sums in another order differ by ~1e-6), not u.
"""

from __future__ import annotations

from .schema import identifier_problem

RUNGS = ("pre-checks", "link", "dumps", "compile", "run", "correctness", "bench", "roofline", "trace", "profile",
         "memcheck", "racecheck", "synccheck")

TOLERANCES = {  # precision -> (rel_l2_tol, cosine floor or None)
    "fp32": (1e-5, None), "tf32": (2e-3, None), "fp16": (2e-3, 0.9999), "bf16": (1.2e-2, 0.999),
    "fp8e4m3": (0.18, 0.98), "fp8e5m2": (0.36, 0.93), "int32": (0.0, None), "int8": (0.0, None),
    "uint8": (0.0, None),
}
ELEMENT_RTOL = {  # precision -> rtol of the elementwise count (4u; fp32: its accumulation tolerance)
    "fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1.6e-2, "fp8e4m3": 0.25, "fp8e5m2": 0.5,
    "int32": 0.0, "int8": 0.0, "uint8": 0.0,
}


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a user rung (an identifier, not a built-in rung's name), or None."""
    if not isinstance(name, str):
        return f"{name!r} is not a string"
    problem = identifier_problem(name)
    if problem:
        return problem
    if name in RUNGS or name.replace("_", "-") in RUNGS:
        return f"'{name}' is the name of a built-in rung"
    return None
