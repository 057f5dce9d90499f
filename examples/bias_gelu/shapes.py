"""The bias + GELU example (link.toml) at other problem sizes: its packages and the writer of a spec
for one shape. bench/epilogue_gelu.py times it; tests/test_bias_gelu.py links and verifies it. Both
load this file by its path (it is not part of the pipelink package)."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pipelink

HERE = Path(__file__).resolve().parent
MAINLOOP = HERE.parent.parent / "components" / "cutlass" / "gemm_mainloop"

# (M, K, N, stages, group): the shapes cuBLASLt's fused epilogue was measured at in issue 20;
# group: bands of tile rows (schedule.group, a divisor of M / 128, 0 for none).
SHAPES = {"m4096_k4096_n16384": (4096, 4096, 16384, 3, 16), "m1024_k8192_n28672": (1024, 8192, 28672, 3, 0)}


def pack(folder: Path) -> Path:
    """The mainloop and the example epilogue, each with tile_n 256 and 128, into ``folder``/packages."""
    packages = folder / "packages"
    variants = [{"tile_n": 256}, {"tile_n": 128}]
    pipelink.pack(MAINLOOP.with_suffix(".cu"), MAINLOOP.with_suffix(".toml"), packages / "gemm_mainloop.plc",
                  variants=variants)
    pipelink.pack(HERE / "bias_gelu_store.cu", HERE / "bias_gelu_store.toml", packages / "bias_gelu_store.plc",
                  variants=variants)
    return packages


def write_spec(folder: Path, packages: Path, shape: tuple) -> Path:
    """link.toml for ``shape`` in ``folder``, its packages in ``packages``, reference.py beside it."""
    m, k, n, stages, group = shape
    folder.mkdir(parents=True, exist_ok=True)
    text = (HERE / "link.toml").read_text()
    for name, value in (("M", m), ("K", k), ("N", n), ("stages", stages), ("group", group)):
        text = re.sub(rf"^{name} = \d+", f"{name} = {value}", text, count=1, flags=re.M)
    text = text.replace('package = "packages/', f'package = "{packages}/')
    text = text.replace('"normal * 0.0156"', f'"normal * {1 / math.sqrt(k):.5f}"')  # weights ~ N(0, 1/K)
    (folder / "link.toml").write_text(text)
    shutil.copyfile(HERE / "reference.py", folder / "reference.py")
    return folder / "link.toml"
