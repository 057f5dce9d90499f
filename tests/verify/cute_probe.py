"""A CuTe DSL kernel for the CPU test of the dumps rung (tests/verify/test_kernel_files.py): the DSL reads
a kernel's source and resolves its names in its module, so it lives at module level here. Import
it only where nvidia-cutlass-dsl is installed."""

from pathlib import Path

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor


@cute.kernel
def add_one(m_x: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    m_x[tidx] = m_x[tidx] + cutlass.Float32(1.0)


@cute.jit
def launch(m_x: cute.Tensor):
    add_one(m_x).launch(grid=[1, 1, 1], block=[128, 1, 1])


def compile_for_sm90a(dump_dir: Path):
    """The kernel compiled against a fake 128-float tensor (for sm_90a when CUTE_DSL_ARCH says so
    before cutlass is imported), its PTX and cubin kept in ``dump_dir``."""
    dump_dir.mkdir(parents=True, exist_ok=True)
    return cute.compile(launch, make_fake_compact_tensor(cutlass.Float32, (128,)),
                        options=f"--keep-ptx --keep-cubin --dump-dir={dump_dir}")
