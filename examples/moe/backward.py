"""The MoE layer's backward pass, cut into the parts the training link will link (issue 51), in float64 numpy: what
each part reads, what the forward must save for it, and what it writes. tests/examples/test_moe_backward.py holds every
gradient to central differences of the forward, so the kernels get a decomposition whose arithmetic is known right
before any of it is CUDA.

Forward (examples/moe/reference.py's layer, W1 interleaved every ``group`` rows; group = I: [gate; up] halves):
  route     logits = x Wr^T, ids = the k largest (ties to the lower id), w = softmax over those k
  permute   the (token, slot) pairs sorted by expert (stable): row r holds x[tok[r]]; expert e owns rows
            starts[e] .. starts[e + 1]
  gate/up   h = xp W1_e^T per expert (grouped GEMM)            saved: h (the SwiGLU backward reads gate and up)
  SwiGLU    a = silu(gate) * up                                saved: a (the down weight-gradient reads it)
  down      o = a W2_e^T per expert (grouped GEMM)             saved: o (the routing weights' gradient reads it)
  combine   y[t] = sum over slots s of w[t, s] o[row(t, s)]    saved: ids, w, the permutation

Backward, part by part (dy given):
  combine^T   do[row(t, s)] = w[t, s] dy[t];  dw[t, s] = dy[t] . o[row(t, s)]
  down^T      da = do W2_e (grouped);  dW2_e = do_e^T a_e (grouped weight gradient)
  SwiGLU^T    dgate = da * up * silu'(gate), dup = da * silu(gate), interleaved like h (fused into da's epilogue)
  gate/up^T   dxp = dh W1_e (grouped);  dW1_e = dh_e^T xp_e (grouped weight gradient)
  permute^T   dx[t] = sum over slots s of dxp[row(t, s)] (a gather-add: each token's k rows)
  route^T     dlogits[t, ids[t, s]] = w[t, s] (dw[t, s] - sum_s' w[t, s'] dw[t, s']), 0 elsewhere (the top-k choice
              is piecewise constant);  dWr = dlogits^T x;  dx += dlogits Wr
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def silu(v: np.ndarray) -> np.ndarray:
    return v * sigmoid(v)


def silu_grad(v: np.ndarray) -> np.ndarray:
    """d silu(v) / dv = sigmoid(v) (1 + v (1 - sigmoid(v)))."""
    s = sigmoid(v)
    return s * (1.0 + v * (1.0 - s))


def split(h: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Columns of an interleaved [R, 2I] (group gate columns, the group matching up columns, ...) -> gate, up."""
    r, n = h.shape
    blocks = h.reshape(r, n // (2 * group), 2, group)
    return blocks[:, :, 0].reshape(r, n // 2), blocks[:, :, 1].reshape(r, n // 2)


def join(gate: np.ndarray, up: np.ndarray, group: int) -> np.ndarray:
    """split's inverse: gate and up [R, I] -> interleaved [R, 2I]."""
    r, n = gate.shape
    return np.stack([gate.reshape(r, n // group, group), up.reshape(r, n // group, group)], 2).reshape(r, 2 * n)


@dataclass
class Saved:
    """What the forward keeps for the backward."""
    x: np.ndarray          # [T, H]
    ids: np.ndarray        # [T, k] expert of each slot
    w: np.ndarray          # [T, k] routing weight of each slot
    tok: np.ndarray        # [R] token of each permuted row (R = T k)
    slot: np.ndarray       # [R] its slot
    starts: np.ndarray     # [E + 1] each expert's first row
    h: np.ndarray          # [R, 2I] gate/up pre-activations
    a: np.ndarray          # [R, I] SwiGLU outputs
    o: np.ndarray          # [R, H] expert outputs, before the routing weights


def forward(x, wr, w1, w2, k: int, group: int) -> tuple[np.ndarray, Saved]:
    t, e = x.shape[0], wr.shape[0]
    logits = x @ wr.T
    ids = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    chosen = np.take_along_axis(logits, ids, 1)
    w = np.exp(chosen - chosen.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    pairs = sorted(((ids[i, s], i, s) for i in range(t) for s in range(k)))  # by expert, then token: stable
    expert = np.array([p[0] for p in pairs])
    tok, slot = np.array([p[1] for p in pairs]), np.array([p[2] for p in pairs])
    starts = np.searchsorted(expert, np.arange(e + 1))
    xp = x[tok]
    h = np.zeros((len(tok), w1.shape[1]))
    o = np.zeros((len(tok), w2.shape[1]))
    a = np.zeros((len(tok), w2.shape[2]))
    for j in range(e):
        rows = slice(starts[j], starts[j + 1])
        h[rows] = xp[rows] @ w1[j].T
        gate, up = split(h[rows], group)
        a[rows] = silu(gate) * up
        o[rows] = a[rows] @ w2[j].T
    y = np.zeros_like(x)
    np.add.at(y, tok, w[tok, slot, None] * o)
    return y, Saved(x, ids, w, tok, slot, starts, h, a, o)


def combine_backward(dy, s: Saved) -> tuple[np.ndarray, np.ndarray]:
    """(do [R, H], dw [T, k])."""
    do = s.w[s.tok, s.slot, None] * dy[s.tok]
    dw = np.zeros_like(s.w)
    dw[s.tok, s.slot] = np.einsum("rh,rh->r", dy[s.tok], s.o)
    return do, dw


def down_backward(do, w2, s: Saved) -> tuple[np.ndarray, np.ndarray]:
    """(da [R, I], dW2 [E, H, I]): a grouped GEMM and a grouped weight-gradient GEMM."""
    da, dw2 = np.zeros_like(s.a), np.zeros_like(w2)
    for j in range(w2.shape[0]):
        rows = slice(s.starts[j], s.starts[j + 1])
        da[rows] = do[rows] @ w2[j]
        dw2[j] = do[rows].T @ s.a[rows]
    return da, dw2


def swiglu_backward(da, s: Saved, group: int) -> np.ndarray:
    """dh [R, 2I], interleaved as h."""
    gate, up = split(s.h, group)
    return join(da * up * silu_grad(gate), da * silu(gate), group)


def gate_up_backward(dh, w1, s: Saved) -> tuple[np.ndarray, np.ndarray]:
    """(dxp [R, H], dW1 [E, 2I, H])."""
    dxp, dw1 = np.zeros((dh.shape[0], w1.shape[2])), np.zeros_like(w1)
    xp = s.x[s.tok]
    for j in range(w1.shape[0]):
        rows = slice(s.starts[j], s.starts[j + 1])
        dxp[rows] = dh[rows] @ w1[j]
        dw1[j] = dh[rows].T @ xp[rows]
    return dxp, dw1


def permute_backward(dxp, s: Saved) -> np.ndarray:
    """dx [T, H] from the permuted rows: each token's k rows added."""
    dx = np.zeros_like(s.x)
    np.add.at(dx, s.tok, dxp)
    return dx


def route_backward(dw, wr, s: Saved) -> tuple[np.ndarray, np.ndarray]:
    """(dx contribution [T, H], dWr [E, H]) through the softmax over the chosen logits."""
    dchosen = s.w * (dw - (s.w * dw).sum(1, keepdims=True))
    dlogits = np.zeros((s.x.shape[0], wr.shape[0]))
    np.put_along_axis(dlogits, s.ids, dchosen, 1)
    return dlogits @ wr, dlogits.T @ s.x


def backward(dy, wr, w1, w2, s: Saved, group: int) -> dict[str, np.ndarray]:
    """Every gradient, the parts in the order the backward link runs them."""
    do, dw = combine_backward(dy, s)
    da, dw2 = down_backward(do, w2, s)
    dh = swiglu_backward(da, s, group)
    dxp, dw1 = gate_up_backward(dh, w1, s)
    dx = permute_backward(dxp, s)
    dx_route, dwr = route_backward(dw, wr, s)
    return {"x": dx + dx_route, "wr": dwr, "w1": dw1, "w2": dw2}
