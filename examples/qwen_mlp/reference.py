"""References and baselines for the fused gate/up + SwiGLU kernel (examples/qwen_mlp/link.toml).

Inputs are keyed 'instance.operand': mainloop.a is X [M, K], mainloop.b the weight [N, K] with
gate and up rows interleaved every 8 rows (see interleave_gate_up). Outputs: epilogue.y [M, N/2]
(or [M, N] when the link's epilogue is the identity, gated = 0).
"""

import torch
import torch.nn.functional as F

GROUP = 8  # gate/up interleave granularity in weight rows (one wgmma n8 block)


def interleave_gate_up(w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """[Wg; Wu] ([n, K] each) -> rows 16 q .. 16 q + 7 = Wg[8 q : 8 q + 8], then Wu[8 q : 8 q + 8]."""
    n, k = w_gate.shape
    return torch.stack([w_gate.view(n // GROUP, GROUP, k), w_up.view(n // GROUP, GROUP, k)], 1).reshape(2 * n, k)


def split_gate_up(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Columns of X @ B^T for an interleaved B -> (gate, up) in output-column order."""
    m, n = h.shape
    blocks = h.view(m, n // (2 * GROUP), 2, GROUP)
    return blocks[:, :, 0].reshape(m, n // 2), blocks[:, :, 1].reshape(m, n // 2)


def swiglu(inputs, facts):
    """The slow reference: fp32 products of the bf16 inputs (no TF32), SiLU(gate) * up in fp32."""
    x, w = inputs["mainloop.a"].float(), inputs["mainloop.b"].float()
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        h = x @ w.t()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    if not facts.get("gated", 1):
        return {"epilogue.y": h}
    gate, up = split_gate_up(h)
    del h
    return {"epilogue.y": F.silu(gate) * up}


@torch.compile(fullgraph=True)
def _silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def cublas_then_compiled_swiglu(inputs, facts):
    """What a torch user runs unfused: cuBLAS for X @ [Wg; Wu]^T (bf16 out, weight stored [N, K] as
    nn.Linear keeps it), then a torch.compile'd SiLU(gate) * up over the two halves. The weight is
    the same interleaved matrix; the halves are taken as strided views, as in a real MLP's chunk(2)."""
    h = inputs["mainloop.a"] @ inputs["mainloop.b"].t()
    if not facts.get("gated", 1):
        return {"epilogue.y": h}
    gate, up = h.chunk(2, dim=-1)  # same bytes and FLOPs as Wg/Wu stored contiguously
    return {"epilogue.y": _silu_mul(gate, up)}


def cublas_alone(inputs, facts):
    """The GEMM part alone (cuBLAS, bf16 out): what the fused kernel's mainloop competes with."""
    return {"epilogue.y": inputs["mainloop.a"] @ inputs["mainloop.b"].t()}
