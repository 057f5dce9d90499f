"""RMSNorm in CuTe DSL: one block of 256 threads per row, a strided loop over the row, the sum of
squares by warp shuffles and then across warps in shared memory.

    pipelink verify examples/loop/rmsnorm_cute.py

The compiled function is kept in `compiled` (a module-level dict), where the dumps rung finds its
PTX and cubin (compiled with --keep-ptx --keep-cubin) and its MLIR (CuTe DSL keeps that only when
CUTE_DSL_KEEP=ir is set before `import cutlass`; the file goes to CUTE_DSL_DUMP_DIR, default the
working directory, so both are set first, to a folder of their own)."""

import os
import tempfile

DUMPS = tempfile.mkdtemp(prefix="rmsnorm-cute-")  # not the cwd
os.environ.setdefault("CUTE_DSL_KEEP", "ir")
os.environ.setdefault("CUTE_DSL_DUMP_DIR", DUMPS)
# The imports after the settings: CuTe DSL reads them when it is imported.
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

from rmsnorm_common import EPS, baselines, inputs, outputs, reference

__all__ = ["inputs", "outputs", "kernel", "reference", "baselines", "VERIFY", "compiled", "compile_only"]

# Read without running the file, so literals only: bytes = x and y (8192 x 4096 bf16 each) and w.
VERIFY = {"precision": "bf16", "bytes": 134225920, "flops": 0}
THREADS = 256
compiled = {}


@cute.kernel
def rmsnorm_rows(mX: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, eps: cutlass.Float32):
    smem = cutlass.utils.SmemAllocator()
    partial = smem.allocate_tensor(cutlass.Float32, cute.make_layout((THREADS // 32,)), byte_alignment=16)
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    lane = cute.arch.lane_idx()
    n = mX.shape[1]
    acc = cutlass.Float32(0.0)
    for i in range(tidx, n, THREADS):
        v = cutlass.Float32(mX[row, i])
        acc += v * v
    acc = cute.arch.warp_reduction_sum(acc)
    if lane == 0:
        partial[warp] = acc
    cute.arch.sync_threads()
    total = cutlass.Float32(0.0)
    for w in cutlass.range_constexpr(THREADS // 32):
        total += partial[w]
    rstd = cute.math.rsqrt(total / cutlass.Float32(n) + eps)
    for i in range(tidx, n, THREADS):
        mY[row, i] = (cutlass.Float32(mX[row, i]) * rstd * cutlass.Float32(mW[i])).to(mY.element_type)


@cute.jit
def launch(mX: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, eps: cutlass.Float32, stream: cuda.CUstream):
    rmsnorm_rows(mX, mW, mY, eps).launch(grid=[mX.shape[0], 1, 1], block=[THREADS, 1, 1], stream=stream)


def kernel(ins, outs):
    args = [from_dlpack(t, assumed_align=16) for t in (ins["x"], ins["w"], outs["y"])]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)  # the harness times this stream
    if "rmsnorm" not in compiled:
        keep = f"--keep-ptx --keep-cubin --dump-dir={DUMPS}"
        compiled["rmsnorm"] = cute.compile(launch, *args, cutlass.Float32(EPS), stream, options=keep)
    compiled["rmsnorm"](*args, cutlass.Float32(EPS), stream)


def compile_only():
    """The kernel compiled for sm_90a without a GPU (pipelink verify sets CUTE_DSL_ARCH=sm_90a before this file
    imports cutlass), on fake tensors of the inputs' shapes and dtypes: its dumps on a machine without one."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from rmsnorm_common import M, N
    fakes = [make_fake_compact_tensor(cutlass.BFloat16, shape) for shape in ((M, N), (N,), (M, N))]
    keep = f"--keep-ptx --keep-cubin --dump-dir={DUMPS}"
    compiled["rmsnorm"] = cute.compile(launch, *fakes, cutlass.Float32(EPS), cuda.CUstream(0), options=keep)
    return {}  # kept in `compiled`, where the dumps rung finds it
