"""The MoE layer's forward pass in torch: the fp32 reference every linked MoE kernel is verified
against, and the two torch implementations bench/moe.py times it beside (issue 13).

Layer: y[t] = sum over the top-k experts e of t of  w[t, e] * W2_e (SiLU(G_e x_t) * (U_e x_t)).
- Routing: logits = x Wr^T (fp32). The top k experts of a token are its k largest logits; ties go
  to the lower expert id (a stable descending sort), so every implementation picks the same set.
  The weights are the softmax over those k logits (Mixtral's rule; Qwen3-MoE's "softmax over all,
  then renormalize the top k" gives the same numbers).
- Weights: W1 [E, 2I, H] holds each expert's gate and up rows interleaved every 8 rows, as the
  Qwen example's weight (interleave_gate_up), so the fused SwiGLU epilogue needs no shuffle; W2
  [E, H, I] is the down projection. bf16 in and out; the reference computes in fp32.
Inputs are keyed 'instance.operand' once the components exist; until then by plain names.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

GROUP = 8  # gate/up interleave granularity in W1's rows


def interleave_gate_up(w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """[..., n, H] gate and up -> [..., 2n, H]: rows 16 q .. 16 q + 7 gate, the next 8 the matching up."""
    *lead, n, h = w_gate.shape
    pair = torch.stack([w_gate.reshape(*lead, n // GROUP, GROUP, h), w_up.reshape(*lead, n // GROUP, GROUP, h)], -3)
    return pair.reshape(*lead, 2 * n, h)


def split_gate_up(h: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """Columns of x W1_e^T for a W1_e interleaved every ``group`` rows -> (gate, up) in output-column order
    (``group`` = I: W1_e as [gate; up] halves, transformers' gate_up_proj)."""
    m, n = h.shape
    blocks = h.reshape(m, n // (2 * group), 2, group)
    return blocks[:, :, 0].reshape(m, n // 2), blocks[:, :, 1].reshape(m, n // 2)


def route(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(expert ids [T, k], weights [T, k] fp32): the k largest logits, ties to the lower id."""
    order = torch.sort(logits.float(), dim=-1, descending=True, stable=True).indices[:, :k]
    weights = torch.softmax(torch.gather(logits.float(), 1, order), dim=-1)
    return order, weights


def moe_reference(x, wr, w1, w2, k: int, group: int = GROUP) -> torch.Tensor:
    """The slow reference: fp32 products of the bf16 inputs (no TF32), fp32 SwiGLU and combine; W1's gate and up
    rows alternate every ``group`` rows."""
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        xf = x.float()
        ids, weights = route(xf @ wr.float().t(), k)
        y = torch.zeros_like(xf)
        for e in ids.unique().tolist():
            tok, slot = (ids == e).nonzero(as_tuple=True)
            gate, up = split_gate_up(xf[tok] @ w1[e].float().t(), group)
            out = (F.silu(gate) * up) @ w2[e].float().t()
            y.index_add_(0, tok, out * weights[tok, slot, None])
        return y
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def moe_eager(x, wr, w1, w2, k: int) -> torch.Tensor:
    """What a torch user writes first: a loop over the experts that got tokens, in bf16 (fp32 accumulate
    inside cuBLAS), the combine in fp32."""
    ids, weights = route(x.float() @ wr.float().t(), k)  # fp32 logits: bf16 ones change the top-k
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in ids.unique().tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        gate, up = split_gate_up(x[tok] @ w1[e].t())
        out = (F.silu(gate) * up) @ w2[e].t()
        y.index_add_(0, tok, out.float() * weights[tok, slot, None])
    return y.to(x.dtype)


def moe_grouped_mm(x, wr, w1, w2, k: int) -> torch.Tensor:
    """The best a torch user writes today: tokens sorted by expert, two torch._grouped_mm (one GEMM
    per expert group in one launch), SiLU * up between, index_add_ combine; run it under
    torch.compile. Needs a GPU with grouped GEMM support (sm_90)."""
    ids, weights = route(x.float() @ wr.float().t(), k)  # fp32 logits: bf16 ones change the top-k
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    tok = order // k
    counts = torch.bincount(flat, minlength=w1.shape[0])
    offs = torch.cumsum(counts, 0).to(torch.int32)
    xs = x[tok]
    h = torch._grouped_mm(xs, w1.transpose(-2, -1), offs=offs)
    gate, up = split_gate_up(h)
    out = torch._grouped_mm(F.silu(gate) * up, w2.transpose(-2, -1), offs=offs)
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    y.index_add_(0, tok, out.float() * weights.reshape(-1)[order, None])
    return y.to(x.dtype)


def flops(tokens: int, hidden: int, inter: int, experts: int, k: int) -> int:
    """Router GEMM + per routed token: gate/up (2 x H x 2I) and down (2 x I x H)."""
    return 2 * tokens * hidden * experts + tokens * k * 6 * hidden * inter


def verify_reference(inputs: dict, facts: dict) -> dict:
    """The reference as `pipelink verify` calls it: the linked kernel's operands, keyed
    'instance.operand' (the weights as the kernel reads them: W1 and W2 with the experts stacked
    along the rows), to its output."""
    e, h, i = facts["E"], facts["H"], facts["I"]
    w1 = inputs["gemm.w1"].reshape(e, 2 * i, h)
    w2 = inputs["gemm.w2"].reshape(e, h, i)
    group = i if facts.get("b_halves") else facts.get("gate_group", GROUP)  # halves: one gate group, one up group
    y = moe_reference(inputs["router.x"], inputs["router.wr"], w1, w2, facts["topk"], group)
    return {"combine.y": y.to(inputs["router.x"].dtype)}
