"""nvcc: CUDA C++ to an LTO-IR fatbin for sm_90a (components at pack time, glue at link time)."""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from pathlib import Path

from ..errors import CompileError
from .toolchain import INCLUDE_DIR, find_nvcc

# compute_90a LTO-IR: wgmma and setmaxnreg need the "a" target. -dc keeps extern __device__
# functions as linkable definitions; the entry must not be __forceinline__ (nvcc then drops it).
# -lineinfo survives LTO: every SASS instruction of the linked kernel carries its inlining chain
# back to the glue's call line, which is how the conformance check knows which component issued
# it. It does not change the generated code (same SASS with and without).
LTO_FLAGS = ("-gencode", "arch=compute_90a,code=lto_90a", "-dc", "-fatbin", "-std=c++17", "-O3", "-lineinfo")


def compile_ltoir(source: Path, *, include_dirs: list[Path] = (), defines: dict[str, int] | None = None,
                  extra_flags: list[str] = (), component: str | None = None) -> tuple[bytes, list[str]]:
    """Compile ``source`` to an LTO-IR fatbin. Returns the bytes and the exact command."""
    nvcc = find_nvcc()
    with tempfile.TemporaryDirectory(prefix="pipelink-nvcc-") as tmp:
        out = Path(tmp) / "out.fatbin"
        cmd = [str(nvcc.path), *LTO_FLAGS, f"-I{INCLUDE_DIR}"]
        cmd += [f"-I{d}" for d in include_dirs]
        cmd += [f"-D{k}={v}" for k, v in (defines or {}).items()]
        cmd += [*extra_flags, str(source), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed on {source.name} (exit {proc.returncode})", file=str(source),
                               component=component, log=(proc.stderr or proc.stdout)[-8000:],
                               hint="repro: " + shlex.join(cmd))
        return out.read_bytes(), cmd
