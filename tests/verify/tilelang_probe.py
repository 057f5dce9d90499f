"""A TileLang kernel for the CPU test of the dumps rung (tests/verify/test_kernel_files.py). Import it only
where tilelang is installed."""

import tilelang
import tilelang.language as T


def compile_for_sm90a(dtype: str = "float32"):
    @T.prim_func
    def add_one(X: T.Tensor((1024,), dtype)):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                X[bx * 128 + i] = X[bx * 128 + i] + 1.0
    return tilelang.compile(add_one, target={"kind": "cuda", "arch": "sm_90a"})
