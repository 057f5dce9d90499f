"""The MoE training step's references (issue 51): what the backward link is checked against, and the inputs its
verify needs that must agree with each other.

- ``saved_inputs`` ([verify] prepare): from the drawn layer inputs (x, wr, w1, w2) the routing and the activations
  the forward link keeps (ids, weights, the permutation, h, a, o), made as the forward makes them: fp32 products of
  the bf16 inputs rounded to bf16, every expert's rows padded to 128 (padding rows -1 in row_token and zero in
  h, a, o), rows from 0. Within an expert the rows are in token order here; the forward's order is its atomics',
  and the backward must not depend on it.
- ``backward_reference`` ([verify] reference): every gradient by float64 autograd of the reference layer, routed as
  the saved ids say (the top-k choice is piecewise constant: its gradient flows through the softmax over the chosen
  logits only).
Operands are keyed as the backward link names them (examples/moe_train/backward.toml).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

TILE_M = 128
GROUP = 8  # W1's gate and up rows (h's columns) alternate every 8


def split_gate_up(h: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = h.shape
    blocks = h.reshape(m, n // (2 * group), 2, group)
    return blocks[:, :, 0].reshape(m, n // 2), blocks[:, :, 1].reshape(m, n // 2)


def route(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [T, k] int32, weights [T, k] fp32): the k largest logits (ties to the lower id), softmax over them."""
    order = torch.sort(logits.float(), dim=-1, descending=True, stable=True).indices[:, :k]
    return order.int(), torch.softmax(torch.gather(logits.float(), 1, order), dim=-1)


def rows_max(tokens: int, experts: int, k: int) -> int:
    """The permuted row space: the forward permute's guarantee."""
    return -(-(tokens * k + experts * (TILE_M - 1)) // TILE_M) * TILE_M


def permutation(ids: torch.Tensor, experts: int, rows: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """(row_token [rows] int32, token_row [T, k] int32, offsets [E + 1]): each expert's pairs in token order, its
    rows padded to TILE_M; -1 in padding rows and past the last expert's."""
    t, k = ids.shape
    flat = ids.reshape(-1).long().cpu()
    counts = torch.bincount(flat, minlength=experts).tolist()
    offsets = [0]
    for c in counts:
        offsets.append(offsets[-1] + -(-c // TILE_M) * TILE_M)
    order = torch.sort(flat, stable=True).indices  # pairs grouped by expert, in (token, slot) order
    row_token = torch.full((rows,), -1, dtype=torch.int32)
    token_row = torch.empty(t * k, dtype=torch.int32)
    cursor = list(offsets[:-1])
    for pair in order.tolist():
        e = int(flat[pair])
        row_token[cursor[e]] = pair // k
        token_row[pair] = cursor[e]
        cursor[e] += 1
    return row_token.to(ids.device), token_row.reshape(t, k).to(ids.device), offsets


def forward_saved(x, wr, w1, w2, k: int, rows: int | None = None) -> dict[str, torch.Tensor]:
    """The forward in fp32 from bf16 inputs, with what it keeps: ids, weights, row_token, token_row, h, a, o (bf16
    activations) and y; ``rows`` the row space (default the forward permute's, rows_max)."""
    t, hidden = x.shape
    experts = wr.shape[0]
    inter = w2.shape[-1]
    w1 = w1.reshape(experts, 2 * inter, hidden)
    w2 = w2.reshape(experts, hidden, inter)
    ids, weights = route(x.float() @ wr.float().t(), k)
    rows = rows or rows_max(t, experts, k)
    row_token, token_row, offsets = permutation(ids, experts, rows)
    h = torch.zeros(rows, 2 * inter, dtype=torch.bfloat16, device=x.device)
    a = torch.zeros(rows, inter, dtype=torch.bfloat16, device=x.device)
    o = torch.zeros(rows, hidden, dtype=torch.bfloat16, device=x.device)
    for e in range(experts):
        lo, hi = offsets[e], offsets[e + 1]
        if lo == hi:
            continue
        tok = row_token[lo:hi].long()
        xp = torch.where((tok >= 0)[:, None], x[tok.clamp(min=0)].float(), 0.0)
        he = xp @ w1[e].float().t()
        gate, up = split_gate_up(he)
        ae = (F.silu(gate) * up).bfloat16()
        h[lo:hi], a[lo:hi] = he.bfloat16(), ae
        o[lo:hi] = (ae.float() @ w2[e].float().t()).bfloat16()
    y = torch.zeros(t, hidden, device=x.device)
    flat_rows = token_row.reshape(-1).long()
    y.index_add_(0, torch.arange(t, device=x.device).repeat_interleave(k),
                 weights.reshape(-1, 1) * o[flat_rows].float())
    return {"ids": ids, "weights": weights, "row_token": row_token, "token_row": token_row, "h": h, "a": a, "o": o,
            "y": y.bfloat16()}


def saved_inputs(inputs: dict, facts: dict) -> dict:
    """[verify] prepare: the saved tensors the drawn x, wr, w1, w2 make, keyed as the backward link's operands."""
    # the row space the backward was linked for (its plan's guarantee): every row past the used ones is -1
    s = forward_saved(inputs["gemm.x"], inputs["gather.wr"], inputs["gemm.w1"], inputs["gemm.w2"], facts["topk"],
                      facts.get("rows_max"))
    return {"combine.ids": s["ids"], "combine.weights": s["weights"], "combine.row_token": s["row_token"],
            "combine.token_row": s["token_row"], "combine.o": s["o"], "epilogue.h": s["h"], "gemm.a": s["a"]}


def layer(x, wr, w1, w2, ids, group: int = GROUP):
    """The reference layer, differentiable, routed by ``ids``: y[t] = sum_s softmax(chosen logits)[s] W2_e
    (silu(gate) * up) for e = ids[t, s]; any float dtype (float64 for the gradients)."""
    experts = wr.shape[0]
    inter = w2.shape[-1]
    w1 = w1.reshape(experts, 2 * inter, -1)
    w2 = w2.reshape(experts, -1, inter)
    weights = torch.softmax(torch.gather(x @ wr.t(), 1, ids.long()), dim=-1)
    y = torch.zeros_like(x)
    for e in ids.unique().tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        gate, up = split_gate_up(x[tok] @ w1[e].t(), group)
        out = (F.silu(gate) * up) @ w2[e].t()
        y = y.index_add(0, tok, out * weights[tok, slot, None])
    return y


def backward_reference(inputs: dict, facts: dict) -> dict:
    """[verify] reference: dx, dwr, dw1, dw2 by float64 autograd of ``layer`` at the saved routing."""
    leaves = {name: inputs[key].double().requires_grad_() for name, key in
              (("x", "gemm.x"), ("wr", "gather.wr"), ("w1", "gemm.w1"), ("w2", "gemm.w2"))}
    y = layer(leaves["x"], leaves["wr"], leaves["w1"], leaves["w2"], inputs["combine.ids"])
    y.backward(inputs["combine.dy"].double())
    return {"gather.dx": leaves["x"].grad, "gather.dwr": leaves["wr"].grad, "epilogue.dw1": leaves["w1"].grad,
            "epilogue.dw2": leaves["w2"].grad}
