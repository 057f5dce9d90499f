"""Error metrics of an output against its reference, judged by the default tolerances per precision.

All metrics are computed in float64 on the host. An output passes when every element was
written (NaN poison gone), all values are finite, it is not all zeros against a non-zero
reference, its relative L2 error ||out - ref|| / ||ref|| is within the tolerance, and (for reduced
precisions) its cosine similarity is above the floor.

The default tolerances per precision (TOLERANCES, ELEMENT_RTOL) and where they come from are in
pipelink/verify_terms.py, which the link spec checks `verify.precision` against.

Beside those, every comparison counts the elements that are off on their own: |out - ref| >
rtol |ref| + atol, with rtol = 4u of the precision (bf16 1.6e-2, torch.testing's default; fp32
1e-5, its accumulation tolerance) and atol = rtol x the reference's RMS (an element near zero is
a sum of terms at the output's scale, so its error is too). The count, and the worst element
(its index, value and reference), say where a failed output is wrong; they are figures, not a
criterion of their own.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..verify_terms import ELEMENT_RTOL, TOLERANCES


@dataclass
class Metrics:
    elements: int
    unwritten: int        # still NaN where the reference is finite: the kernel never wrote them
    nonfinite: int        # NaN or Inf the kernel wrote (or left) where the reference is finite
    max_abs_err: float
    max_rel_err: float    # elementwise |out - ref| / max(|ref|, 1e-6 * max|ref|)
    rmse: float
    rel_l2: float
    psnr_db: float
    cosine: float
    all_zero_vs_nonzero: bool
    mismatched: int = 0   # elements with |out - ref| > element_rtol |ref| + element_atol (finite reference)
    element_rtol: float = 0.0
    element_atol: float = 0.0
    worst_index: int = -1  # the element furthest outside that bound (by its ratio to the bound)
    worst_out: float = 0.0
    worst_ref: float = 0.0

    def to_json(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


# Integer outputs cannot hold NaN: they are poisoned with the value of their storage type that a kernel is least
# likely to mean (the most negative signed value; an unsigned byte's largest), and counted unwritten where they
# still hold it and the reference does not. torch stores uint64 and uint32 in int64 and int32 (runtime.TORCH_DTYPES).
INT_POISON = {"int32": -(1 << 31), "int8": -(1 << 7), "uint8": (1 << 8) - 1, "uint64": -(1 << 63),
              "uint32": -(1 << 31)}


def poison_value(dtype: str) -> float | int:
    """What an output of the contract dtype ``dtype`` is filled with before the kernel runs: NaN for a floating
    type (every one of ours has it, fp8 included), INT_POISON's value for an integer type. An element that still
    holds it afterwards was never written (``compare`` with ``poison``)."""
    if dtype in INT_POISON:
        return INT_POISON[dtype]
    if dtype not in TOLERANCES:
        raise ValueError(f"no poison for dtype '{dtype}'")
    return math.nan


def tolerance(precision: str, rel_l2_tol: float | None) -> float:
    """The relative L2 error an output of ``precision`` may have: the spec's ``rel_l2_tol`` where it gives one
    (0: exact), else the precision's default (TOLERANCES)."""
    return TOLERANCES[precision][0] if rel_l2_tol is None else rel_l2_tol


def compare(out, ref, precision: str = "fp32", poison: float | int | None = None) -> Metrics:
    """Metrics of ``out`` against ``ref``: numpy arrays, or torch tensors, which are compared where
    they are (the verify child's outputs stay on the GPU: a host float64 copy of a 32 M-element
    output and its dozen passes took seconds per seed). The same float64 arithmetic either way.
    ``precision`` sets the elementwise bound of the mismatch count (ELEMENT_RTOL). ``poison`` is what
    the output was filled with before the run (``poison_value``): a NaN is unwritten wherever the
    reference is finite (whatever the poison, as no finite reference is NaN), an integer poison
    wherever the reference differs from it."""
    xp = _array_module(out)
    if xp is np:
        out = np.asarray(out, dtype=np.float64).ravel()
        ref = np.asarray(ref, dtype=np.float64).ravel()
    else:
        out = out.detach().to(xp.float64).reshape(-1)
        ref = xp.as_tensor(ref).to(device=out.device, dtype=xp.float64).reshape(-1)
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"output has {out.shape[0]} elements, reference {ref.shape[0]}")
    ref_ok = xp.isfinite(ref)
    nan = xp.isnan(out)
    left = nan  # still the poison: never written
    if poison is not None and not math.isnan(poison):
        left = left | ((out == float(poison)) & (ref != float(poison)))
    unwritten = int(xp.count_nonzero(left & ref_ok))
    nonfinite = int(xp.count_nonzero(~xp.isfinite(out) & ref_ok)) - int(xp.count_nonzero(nan & ref_ok))
    o = xp.where(xp.isfinite(out) & ~left, out, 0.0)[ref_ok]
    r = ref[ref_ok]
    n = int(r.shape[0])
    diff = o - r
    scale = float(xp.max(xp.abs(r))) if n else 0.0
    ref_norm, out_norm = float(xp.linalg.norm(r)), float(xp.linalg.norm(o))
    rmse = float(xp.sqrt(xp.mean(diff * diff))) if n else 0.0
    any_diff, any_out, any_ref = (bool((a != 0).any()) for a in (diff, o, r))
    rtol = ELEMENT_RTOL[precision]
    atol = rtol * (float(xp.sqrt(xp.mean(r * r))) if n else 0.0)
    # ratio > 1: outside the bound; the bound is 0 for exact precisions, where any difference counts
    excess = xp.abs(diff) / (rtol * xp.abs(r) + atol) if atol else (xp.abs(diff) > 0) * 2.0
    mismatched = int(xp.count_nonzero(excess > 1)) if n else 0
    w = int(xp.argmax(excess)) if mismatched else -1
    if mismatched:  # the worst element's index in the whole output (``o`` and ``r`` hold the finite-reference ones)
        finite_index = xp.nonzero(ref_ok)[0] if xp is np else xp.nonzero(ref_ok).reshape(-1)
        worst_index = int(finite_index[w])
    return Metrics(
        elements=int(out.shape[0]), unwritten=unwritten, nonfinite=nonfinite,
        max_abs_err=float(xp.max(xp.abs(diff))) if n else 0.0,
        max_rel_err=float(xp.max(xp.abs(diff) / xp.abs(r).clip(min=1e-6 * scale if scale else 1e-30))) if n else 0.0,
        rmse=rmse,
        rel_l2=float(xp.linalg.norm(diff)) / ref_norm if ref_norm else (0.0 if not any_diff else math.inf),
        psnr_db=float(20 * math.log10(scale / rmse)) if rmse and scale else math.inf,
        cosine=float(xp.dot(o, r)) / (out_norm * ref_norm) if out_norm and ref_norm else (1.0 if out_norm == ref_norm else 0.0),
        all_zero_vs_nonzero=not any_out and any_ref,
        mismatched=mismatched, element_rtol=rtol, element_atol=atol,
        worst_index=worst_index if mismatched else -1,
        worst_out=float(o[w]) if mismatched else 0.0, worst_ref=float(r[w]) if mismatched else 0.0,
    )


def _array_module(x):
    """numpy, or torch where ``x`` is a torch tensor (torch is imported only by whoever made one)."""
    if type(x).__module__.startswith("torch"):
        import torch
        return torch
    return np


def judge(m: Metrics, precision: str, rel_l2_tol: float | None = None) -> tuple[bool, list[str]]:
    """(passed, reasons it failed)."""
    tol, cos_floor = tolerance(precision, rel_l2_tol), TOLERANCES[precision][1]
    why = []
    if m.unwritten:
        why.append(f"{m.unwritten} of {m.elements} elements never written (they still hold the poison)")
    if m.nonfinite:
        why.append(f"{m.nonfinite} NaN/Inf values where the reference is finite")
    if m.all_zero_vs_nonzero:
        why.append("output is all zeros but the reference is not")
    if not m.rel_l2 <= tol:
        why.append(f"relative L2 error {m.rel_l2:.3g} > {tol:g} ({precision})")
    if cos_floor is not None and not m.cosine >= cos_floor:
        why.append(f"cosine similarity {m.cosine:.6f} < {cos_floor} ({precision})")
    if why and m.mismatched:  # where a failed output is wrong: how many elements, and the worst one
        why.append(f"{m.mismatched} of {m.elements} elements off by more than {m.element_rtol:g}|ref| + "
                   f"{m.element_atol:.3g} (worst: element {m.worst_index}, {m.worst_out:.6g} against {m.worst_ref:.6g})")
    return not why, why
