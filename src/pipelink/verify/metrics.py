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


def compare(out, ref, precision: str = "fp32") -> Metrics:
    """Metrics of ``out`` against ``ref``: numpy arrays, or torch tensors, which are compared where
    they are (the verify child's outputs stay on the GPU: a host float64 copy of a 32 M-element
    output and its dozen passes took seconds per seed). The same float64 arithmetic either way.
    ``precision`` sets the elementwise bound of the mismatch count (ELEMENT_RTOL)."""
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
    unwritten = int(xp.count_nonzero(xp.isnan(out) & ref_ok))
    nonfinite = int(xp.count_nonzero(~xp.isfinite(out) & ref_ok)) - unwritten
    o = xp.where(xp.isfinite(out), out, 0.0)[ref_ok]
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
    tol, cos_floor = TOLERANCES[precision]
    tol = rel_l2_tol if rel_l2_tol is not None else tol
    why = []
    if m.unwritten:
        why.append(f"{m.unwritten} of {m.elements} elements never written (still NaN from the poison)")
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
