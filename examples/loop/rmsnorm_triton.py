"""RMSNorm in Triton: one program per row, the row in registers (N = 4096 fits one block).

    pipelink verify examples/loop/rmsnorm_triton.py
"""

import triton
import triton.language as tl

from rmsnorm_common import EPS, N, baselines, inputs, outputs, reference

# Read without running the file, so literals only: bytes = x and y (8192 x 4096 bf16 each) and w.
__all__ = ["inputs", "outputs", "kernel", "reference", "baselines", "VERIFY", "compile_only"]  # what verify reads

VERIFY = {"precision": "bf16", "bytes": 134225920, "flops": 0}


@triton.jit
def rmsnorm_rows(x_ptr, w_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n + eps)
    tl.store(y_ptr + row * n + cols, (x * rstd * w).to(tl.bfloat16), mask=mask)


def kernel(ins, outs):
    x, w, y = ins["x"], ins["w"], outs["y"]
    rmsnorm_rows[(x.shape[0],)](x, w, y, N, EPS, BLOCK=triton.next_power_of_2(N), num_warps=8)



def compile_only():
    """rmsnorm_rows compiled for sm_90a without a GPU, as kernel() compiles it on one (bf16 pointers, 8 warps,
    the row in one block): `pipelink verify` on a machine without a GPU writes its dumps from this."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    signature = {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "n": "i32", "eps": "fp32", "BLOCK": "constexpr"}
    source = ASTSource(rmsnorm_rows, signature=signature, constexprs={"BLOCK": triton.next_power_of_2(N)})
    return {"rmsnorm_rows": triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})}
