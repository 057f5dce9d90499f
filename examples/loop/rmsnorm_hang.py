"""A kernel that never finishes (Triton): each program waits for a flag nobody sets. verify must
report `hang` within the timeout, kill the child, and the next verify in the same shell must pass.

    pipelink verify examples/loop/rmsnorm_hang.py      # exit status 1, the compile or run rung: hang
"""

import torch
import triton
import triton.language as tl

from rmsnorm_common import inputs, outputs, reference

__all__ = ["inputs", "outputs", "kernel", "reference", "VERIFY"]  # what pipelink verify reads

VERIFY = {"precision": "bf16", "timeout": 20}


@triton.jit
def wait_forever(flag_ptr, y_ptr):
    flag = tl.load(flag_ptr, volatile=True)
    while flag == 0:  # nothing ever writes the flag
        flag = tl.load(flag_ptr, volatile=True)
    tl.store(y_ptr, flag.to(tl.bfloat16))


def kernel(ins, outs):
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    wait_forever[(1,)](flag, outs["y"])
