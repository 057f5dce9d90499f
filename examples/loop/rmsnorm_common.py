"""What every RMSNorm version in this folder shares: its inputs, its outputs, the float64
reference and the torch baseline. y = x / sqrt(mean(x^2) + eps) * w, over the rows of x [M, N].

Sizes: 8192 rows of 4096 bf16 (64 MB in, 64 MB out): memory-bound, so the roofline's floor is the
bytes (x read once, y written once, w once) over the read bandwidth."""

import torch

M, N, EPS = 8192, 4096, 1e-6
BYTES = 2 * M * N * 2 + N * 2   # VERIFY's "bytes" in each kernel file says the same


def inputs(seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, N, generator=gen, device="cuda").to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(N, generator=gen, device="cuda")).to(torch.bfloat16)
    return {"x": x, "w": w}


def outputs(ins):
    return {"y": torch.empty_like(ins["x"])}


def reference(ins):
    x, w = ins["x"].double(), ins["w"].double()
    return {"y": x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + EPS) * w}


def torch_rmsnorm(ins):
    return torch.nn.functional.rms_norm(ins["x"], (N,), ins["w"], EPS)


baselines = {"torch_rms_norm": torch_rmsnorm}
