"""Reference and baselines for examples/bias_gelu/link.toml: Y = GELU(X W^T + bias), bf16.

Inputs are keyed 'instance.operand': mainloop.a is X [M, K], mainloop.b the weight W [N, K] (as
nn.Linear stores it), epilogue.bias [N]. Output: epilogue.y [M, N].
"""

import torch
import torch.nn.functional as F


def bias_gelu(inputs, facts):
    """The slow reference: fp32 products of the bf16 inputs (no TF32), the exact GELU in fp32 of the
    tanh form the kernel computes (the two differ by < 1e-3 relative, below bf16 rounding)."""
    x, w = inputs["mainloop.a"].float(), inputs["mainloop.b"].float()
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        h = x @ w.t() + inputs["epilogue.bias"].float()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return {"epilogue.y": F.gelu(h, approximate="tanh")}


def cublaslt_bias_gelu(inputs, facts):
    """cuBLASLt's own fused bias + GELU epilogue, as torch exposes it."""
    return {"epilogue.y": torch._addmm_activation(inputs["epilogue.bias"], inputs["mainloop.a"],
                                                  inputs["mainloop.b"].t(), use_gelu=True)}


@torch.compile(fullgraph=True)
def _gelu(h: torch.Tensor) -> torch.Tensor:
    return F.gelu(h, approximate="tanh")


def linear_then_compiled_gelu(inputs, facts):
    """What a torch user writes unfused: F.linear (cuBLAS, bias in its epilogue), then a compiled GELU."""
    return {"epilogue.y": _gelu(F.linear(inputs["mainloop.a"], inputs["mainloop.b"], inputs["epilogue.bias"]))}
