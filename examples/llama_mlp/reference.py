"""References and torch baselines for the Llama MLP's two kernels (gate_up.toml, down.toml).

Inputs are keyed 'instance.operand': mainloop.a is the activation [M, K], mainloop.b the weight [N, K] as the model
keeps it (gate_up: the gate rows [0, N/2), then the up rows [N/2, N)). Output: epilogue.y.
"""

import torch
import torch.nn.functional as F


def _fp32_product(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """fp32 products of the bf16 inputs (no TF32)."""
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return x.float() @ w.float().t()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def gate_up(inputs, facts):
    """SiLU(X Wg^T) * (X Wu^T) in fp32, the weight's halves as Wg and Wu."""
    h = _fp32_product(inputs["mainloop.a"], inputs["mainloop.b"])
    gate, up = h.chunk(2, dim=-1)
    return {"epilogue.y": F.silu(gate) * up}


def torch_gate_up(inputs, facts):
    """What transformers' LlamaMLP runs eagerly: two bf16 linears (cuBLAS) and SiLU(gate) * up."""
    wg, wu = inputs["mainloop.b"].chunk(2, dim=0)
    x = inputs["mainloop.a"]
    return {"epilogue.y": F.silu(F.linear(x, wg)) * F.linear(x, wu)}


def down(inputs, facts):
    return {"epilogue.y": _fp32_product(inputs["mainloop.a"], inputs["mainloop.b"])}


def torch_down(inputs, facts):
    return {"epilogue.y": F.linear(inputs["mainloop.a"], inputs["mainloop.b"])}
