"""What a split link's per-launch memset cost (issue 15, M = 128): the runtime cleared stream-K's tile
counts (1600 bytes at M = 128) with a cuMemsetD8Async before every launch, a GPU operation of its own
(0.9 %, measured: bench/NOTES.md, fourteenth session). Timed here as the same tiles kernel (which has
no workspace to clear) alone and behind a memset of the split link's count bytes, interleaved, with
the split link itself beside them. The counts now reset themselves (the block that completes a tile
stores 0 back) and are cleared before a runtime's first launch only; the split link here runs so.

    PYTHONPATH=src python3 bench/experiments/memset_cost.py [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the harness and qwen_mlp
import qwen_mlp  # noqa: E402
from harness import RESULTS, example, paired_ratio, time_interleaved, warm_up, write_result  # noqa: E402
from qwen_mlp import shapes  # noqa: E402
from pipelink.abi import TILE_COUNTS, KernelABI  # noqa: E402

SHAPE = (128, 5120, 51200, 0)  # the gate/up GEMM alone at M = 128
TILES = (256, 4, "column_major", 0, 1)
SPLIT = (128, 6, "column_major", 0, 1, "stream_k")


def main() -> None:
    import torch
    from cuda.bindings import driver
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--reps", type=int, default=1000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pl-memset-"))
    packages = shapes.pack(work)
    case = qwen_mlp.Case(SHAPE, example("qwen_mlp/reference.py"))
    tiles, _, _ = qwen_mlp.linked_launch(shapes.write_spec(work / "tiles", packages, SHAPE, TILES), "pipelink", case,
                                         SHAPE[2])
    split, _, kernel = qwen_mlp.linked_launch(shapes.write_spec(work / "split", packages, SHAPE, SPLIT), "pipelink",
                                              case, SHAPE[2])
    zeroed = sum(int(p.shape[0]) for p in KernelABI.from_manifest(kernel.manifest).workspaces if p.ref == TILE_COUNTS)
    scratch = torch.empty(max(zeroed, 256), dtype=torch.uint8, device="cuda")

    def memset_then_tiles():
        driver.cuMemsetD8Async(scratch.data_ptr(), 0, zeroed, torch.cuda.current_stream().cuda_stream)
        tiles()

    fns = {"tiles": tiles, "memset+tiles": memset_then_tiles, "stream_k": split}
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    warm_up(tiles, seconds=1.0)
    times = time_interleaved(fns, args.reps)
    payload = {"shape": list(SHAPE), "tiles": list(TILES), "split": list(SPLIT), "zeroed_bytes": zeroed,
               "times": times, "median_ms": {k: v["median_ms"] for k, v in times.items()},
               "memset_over_tiles_paired": paired_ratio(times["memset+tiles"], times["tiles"])}
    path = write_result("memset_cost", payload, args.out)
    print(payload["median_ms"], payload["memset_over_tiles_paired"], path)


if __name__ == "__main__":
    main()
