"""The Qwen example (link.toml) at other problem sizes: the model shapes, the packed variants, and the writer of a
spec for one shape and configuration (its [tune] searches come with it: bench/qwen_mlp.py tunes each shape and
times the operator that serves it). Loaded by its path (it is not part of the pipelink package).
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pipelink
from pipelink.demo import packaged_spec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

# The two components and the variants each is packed with: (source, contract, variants).
# 144 and 208 are the widths that fill the last wave at M = 128 (51200 / 144 -> 356 tiles, 2.7 waves on 132 SMs, as
# cuBLAS's tiles there; 51200 / 208 -> 247, its second wave 115 SMs), the last tile column partial. 200 (256 tiles, the
# second wave 124 SMs) is for the identity epilogue only: SiLU(gate) * up needs the width in 16s.
TILE_WIDTHS = (128, 144, 200, 208, 256)
# 64-row tiles (small M: half the rows of padding at M = 64), in the widths whose halves keep SwiGLU's gate and up
# blocks paired inside each warpgroup (the epilogue's contract limit).
SMALL_M_WIDTHS = (128, 256)
TILES = [(128, n) for n in TILE_WIDTHS] + [(64, n) for n in SMALL_M_WIDTHS]  # (tile_m, tile_n) packed


def swiglu_takes(gated: int, tile_n: int) -> bool:
    """Whether swiglu_store takes the width: SiLU(gate) * up pairs 8-column blocks, so the width must be a multiple
    of 16 there (its contract's limit); the identity epilogue takes every packed width (200 is for it alone)."""
    return not gated or tile_n % 16 == 0


COMPONENTS = [(ROOT / "components/cutlass/gemm_mainloop.cu", ROOT / "components/cutlass/gemm_mainloop.toml",
               [{"tile_m": m, "tile_n": n} for m, n in TILES]),
              (ROOT / "components/raw/swiglu_store.cu", ROOT / "components/raw/swiglu_store.toml",
               [{"tile_m": m, "tile_n": n, "gated": g} for m, n in TILES for g in (0, 1) if swiglu_takes(g, n)])]

# Shapes: (M, K, N, gated). N counts gate and up rows together (2 x intermediate size).
SHAPES = {
    "qwen_gate_up_64": (64, 5120, 51200, 1),
    "qwen_gate_up_128": (128, 5120, 51200, 1),
    "qwen_gate_up_1024": (1024, 5120, 51200, 1),
    "qwen_gate_up_4096": (4096, 5120, 51200, 1),
    "qwen_gate_up_8192": (8192, 5120, 51200, 1),
    "qwen_down_4096": (4096, 25600, 5120, 0),
    "llama1b_gate_up_4096": (4096, 2048, 16384, 1),
}
# Which configuration serves a shape is `pipelink tune`'s word (link.toml's [tune] searches, docs/tuning.md);
# bench/configs.py keeps the hand-written table the paper's rows were timed with (QWEN_PAPER_ROWS).


def pack(folder: Path) -> Path:
    """Both components with their variants, into ``folder``/packages."""
    packages = folder / "packages"
    for source, contract, variants in COMPONENTS:
        pipelink.pack(source, contract, packages / f"{source.stem}.plc", variants=variants)
    return packages


def write_spec(folder: Path, packages: Path, shape: tuple, config: tuple, facts: dict | None = None) -> Path:
    """link.toml for ``shape`` (M, K, N, gated) and ``config`` (tile_n, stages, order, group,
    cluster[, split[, tile_m]]) in ``folder``, its packages in ``packages``, with reference.py beside it. ``facts``
    sets further link-time facts or replaces these; a fact set to None is left out (its contract
    default applies)."""
    m, k, n, gated = shape
    tile_n, stages, order, group, cluster, split, tile_m = unpack(config)
    # A cluster under row_major holds one tile row: its blocks share the A tile (the mainloop's share_a), where under
    # column_major they share the B tile of one column.
    share_a = 1 if order == "row_major" and cluster > 1 else None
    table = {"M": m, "K": k, "N": n, "tile_m": tile_m, "tile_n": tile_n, "stages": stages, "gated": gated,
             "share_a": share_a, **(facts or {})}
    folder.mkdir(parents=True, exist_ok=True)
    text = (HERE / "link.toml").read_text()
    lines = "".join(f"{name} = {value}\n" for name, value in table.items() if value is not None)
    text = re.sub(r"\[facts\]\n(.*?\n)\n", lambda _: f"[facts]\n{lines}\n", text, count=1, flags=re.S)
    text = re.sub(r'order = "\w+"', f'order = "{order}"\ngroup = {group}' + (f'\nsplit = "{split}"' if split != "tiles"
                                                                            else ""), text, count=1)
    text = text.replace('"normal * 0.014"', f'"normal * {1 / math.sqrt(k):.5f}"')
    text = packaged_spec(text, packages)
    # Clusters of 4 on the H200: the driver places 30 of them at once (cuOccupancyMaxActiveClusters, recorded as
    # resident_clusters in bench/results/logs/qwen_mlp-gpu-20261205T124011.partial.json), so a persistent grid of
    # 132 would leave 3 to start when others have finished (on 128 blocks, 2 did: 17 % slower than pairs); 120
    # blocks keep every one resident.
    grid = "\ngrid = 120" if cluster == 4 else ""
    text = text.replace("[verify]", f"[launch]\ncluster = {cluster}{grid}\n\n[verify]")
    (folder / "link.toml").write_text(text)
    shutil.copyfile(HERE / "reference.py", folder / "reference.py")
    return folder / "link.toml"


def epilogue_takes(gated: int, config: tuple) -> bool:
    """Whether swiglu_store takes the configuration's tile width (`swiglu_takes`)."""
    return swiglu_takes(gated, unpack(config)[0])


def unpack(config: tuple) -> tuple:
    """(tile_n, stages, order, group, cluster, split, tile_m) of a configuration: split is "tiles" and tile_m 128
    where the tuple leaves them out."""
    return tuple(config) + ("tiles", 128)[len(config) - 5:]


def candidate_dir(config: tuple) -> str:
    """A folder name for one configuration."""
    tile_n, stages, order, group, cluster, split, tile_m = unpack(config)
    return (f"n{tile_n}_s{stages}_{order}_g{group}_c{cluster}" + (f"_{split}" if split != "tiles" else "") +
            (f"_m{tile_m}" if tile_m != 128 else ""))
