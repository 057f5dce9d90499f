"""Reference for examples/blackwell_gemm/link.toml: Y = GELU(X W^T + bias), bf16 (mainloop.a = X [M, K],
mainloop.b = W [N, K], epilogue.bias [N], epilogue.y [M, N]): fp32 products of the bf16 inputs, the tanh GELU."""

import torch
import torch.nn.functional as F


def bias_gelu(inputs, facts):
    x, w = inputs["mainloop.a"].float(), inputs["mainloop.b"].float()
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        h = x @ w.t() + inputs["epilogue.bias"].float()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return {"epilogue.y": F.gelu(h, approximate="tanh")}
