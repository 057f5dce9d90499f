"""A deliberately wrong RMSNorm (Triton): the weight is never applied. verify must fail it in the
correctness rung, with the error figures.

    pipelink verify examples/loop/rmsnorm_wrong.py     # exit status 1
"""

import triton
import triton.language as tl

from rmsnorm_common import EPS, N, inputs, outputs, reference

__all__ = ["inputs", "outputs", "kernel", "reference", "VERIFY"]  # what pipelink verify reads

VERIFY = {"precision": "bf16"}


@triton.jit
def rmsnorm_no_weight(x_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n + eps)
    tl.store(y_ptr + row * n + cols, (x * rstd).to(tl.bfloat16), mask=mask)  # the bug: no * w


def kernel(ins, outs):
    x, y = ins["x"], outs["y"]
    rmsnorm_no_weight[(x.shape[0],)](x, y, N, EPS, BLOCK=triton.next_power_of_2(N), num_warps=8)
