"""The bias + GELU example (link.toml) at other problem sizes: its packages and the writer of a spec
for one shape. bench/epilogue_gelu.py times it; tests/examples/test_bias_gelu.py links and verifies it. Both
load this file by its path (it is not part of the pipelink package)."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pipelink
from pipelink.demo import packaged_spec

HERE = Path(__file__).resolve().parent
MAINLOOP = HERE.parent.parent / "components" / "cutlass" / "gemm_mainloop"

# (M, K, N): the shapes cuBLASLt's fused epilogue was measured at in issue 20.
SHAPES = {"m4096_k4096_n16384": (4096, 4096, 16384), "m1024_k8192_n28672": (1024, 8192, 28672)}
# The link-time table: (tile_n, stages, group, cluster, store_split) per shape, timed together, the
# fastest that passes the reference check kept. A whole 256-column staging tile is 64 KB: 3 ring
# stages of 48 KB fit beside it, 4 beside half of it (store_split 2); 128-column tiles fit 6 stages
# of 32 KB beside a whole one. group: bands of tile rows (a divisor of M / 128, 0 for none);
# cluster 2: two blocks share each B tile by TMA multicast.
CANDIDATES = {"m4096_k4096_n16384": [(256, 4, 16, 1, 2), (256, 3, 16, 1, 1), (128, 6, 16, 1, 1)],
              "m1024_k8192_n28672": [(256, 4, 0, 1, 2), (256, 3, 0, 1, 1), (128, 6, 0, 1, 1)]}


def pack(folder: Path) -> Path:
    """The mainloop (tile_n 256, 128) and the example epilogue (those with store_split 1, 2) into
    ``folder``/packages."""
    packages = folder / "packages"
    pipelink.pack(MAINLOOP.with_suffix(".cu"), MAINLOOP.with_suffix(".toml"), packages / "gemm_mainloop.plc",
                  variants=[{"tile_n": 256}, {"tile_n": 128}])
    pipelink.pack(HERE / "bias_gelu_store.cu", HERE / "bias_gelu_store.toml", packages / "bias_gelu_store.plc",
                  variants=[{"tile_n": n, "store_split": s} for n in (256, 128) for s in (2, 1)])
    return packages


def write_spec(folder: Path, packages: Path, shape: tuple, config: tuple = (None, 4, 0, 1, None)) -> Path:
    """link.toml for ``shape`` (M, K, N) and ``config`` (tile_n, stages, group, cluster, store_split;
    None: left to the components) in ``folder``, its packages in ``packages``, reference.py beside it."""
    (m, k, n), (tile_n, stages, group, cluster, split) = shape, config
    folder.mkdir(parents=True, exist_ok=True)
    text = (HERE / "link.toml").read_text()
    for name, value in (("M", m), ("K", k), ("N", n), ("stages", stages), ("group", group)):
        text = re.sub(rf"^{name} = \d+", f"{name} = {value}", text, count=1, flags=re.M)
    for name, value in (("tile_n", tile_n), ("store_split", split)):
        if value is not None:
            text = re.sub(r"^stages = ", f"{name} = {value}\nstages = ", text, count=1, flags=re.M)
    text = packaged_spec(text, packages)
    text = text.replace('"normal * 0.0156"', f'"normal * {1 / math.sqrt(k):.5f}"')  # weights ~ N(0, 1/K)
    text = text.replace("[verify]", f"[launch]\ncluster = {cluster}\n\n[verify]")
    (folder / "link.toml").write_text(text)
    shutil.copyfile(HERE / "reference.py", folder / "reference.py")
    return folder / "link.toml"
