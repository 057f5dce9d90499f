"""RMSNorm in TileLang: one block of 128 threads per row; the row copied to shared memory, squared,
reduced, scaled.

    pipelink verify examples/loop/rmsnorm_tilelang.py

The compiled kernel is kept in `compiled` (a module-level dict), where the dumps rung finds it."""

import tilelang
import tilelang.language as T

from rmsnorm_common import EPS, M, N, baselines, inputs, outputs, reference

__all__ = ["inputs", "outputs", "kernel", "reference", "baselines", "VERIFY", "compiled"]  # what verify reads

# Read without running the file, so literals only: bytes = x and y (8192 x 4096 bf16 each) and w.
VERIFY = {"precision": "bf16", "bytes": 134225920, "flops": 0}
compiled = {}


def rmsnorm_program(m: int, n: int, eps: float, threads: int = 128, dtype: str = "bfloat16"):
    @T.prim_func
    def rmsnorm_rows(X: T.Tensor((m, n), dtype), W: T.Tensor((n,), dtype), Y: T.Tensor((m, n), dtype)):
        with T.Kernel(m, threads=threads) as row:
            xs = T.alloc_shared((1, n), "float32")
            squares = T.alloc_fragment((1, n), "float32")
            total = T.alloc_fragment((1,), "float32")
            T.copy(X[row, 0], xs)
            for i, j in T.Parallel(1, n):
                squares[i, j] = xs[i, j] * xs[i, j]
            T.reduce_sum(squares, total, dim=1)
            for i in T.Parallel(1):
                total[i] = T.rsqrt(total[i] / n + eps)
            for i, j in T.Parallel(1, n):
                Y[row + i, j] = xs[i, j] * total[i] * W[j]
    return rmsnorm_rows


def kernel(ins, outs):
    if "rmsnorm" not in compiled:
        compiled["rmsnorm"] = tilelang.compile(rmsnorm_program(M, N, EPS), target={"kind": "cuda", "arch": "sm_90a"})
    compiled["rmsnorm"](ins["x"], ins["w"], outs["y"])
