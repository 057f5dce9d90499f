"""How fast one SM, and k SMs together, stream a weight matrix through a TMA ring: the two numbers every
prediction of issues 14 and 15 has leaned on without having measured them.

    python bench/experiments/sm_stream.py [--out DIR] [--reps N] [--groups latency,waves,l2,decode]

A block (one an SM: the launch asks for more shared memory than two blocks could have) streams its rows of a
row-major bf16 matrix in TMA boxes [box_rows, box_cols] through a ring of `stages` boxes: one thread issues a
box, waits for the oldest, and reissues into its slot, so the block has stages x box bytes in flight and no
compute. Blocks past `active` return at once. Each block writes %globaltimer at its first issue and its last
landing, so a run gives the kernel's time (CUDA events, L2 flushed before each launch, as the tables time) and
every block's own rate.

Four groups of configurations:
- latency: 1, 4 and 16 blocks, 16 KB boxes, 1 to 12 stages (16-192 KB in flight). A block's rate over what it
  keeps in flight is the round trip it sees (Little's law); where the rate stops growing with the stages, the
  SM's own limit.
- waves: the Qwen gate/up weight (51200 x 5120, 524 MB) cut over 48 to 132 blocks with the rings the GEMM's
  tiles give (128 or 144 rows x 6 stages, 208 or 256 rows x 4). Do k SMs keep HBM as busy as 132? That is
  what a last wave of k tiles costs (issue 15: 256-wide tiles leave 68 SMs in the second wave, 208-wide 115).
- l2: the B = 64 activation (256 KB) read whole by 96 to 132 blocks, from L2 after the first: is the decode
  block's projection at B = 64 bound by these re-reads (37-41 MB a projection), as its B-dependent cost suggests?
- decode: the Llama block's projections alone: Wqkv (3072 x 2048) over 96 blocks of 32 rows and Wo (2048 x
  2048) over 128 blocks of 16, 4 to 16 stages of the chunks llama_gemv streams; and an empty launch. The
  phase's weight floor with its ring, against what the block's phases measure (issue 14).
Writes results/sm_stream-<gpu>-<stamp>.json.
"""

from __future__ import annotations

import argparse
import ctypes
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import compile_probe, l2_flush_bytes, log, time_interleaved, write_result  # noqa: E402
from pipelink.verify import timing  # noqa: E402

GRID, THREADS = 132, 32
SMEM = 200 * 1024  # more than half of the SM's 228 KB: one block an SM
PARAMS_BYTES = 192  # the kernel's Params: a 128-byte tensor map, a pointer and 7 ints, padded to the map's 64 bytes

SOURCE = r"""
#include <pipelink/component.h>  // the mbarrier and TMA wrappers the components use

struct Params {
  pl_tensor_map map;           // the matrix, box [box_rows][box_cols]
  unsigned long long* stamps;  // [grid][2]: %globaltimer at the block's first issue and at its last landing
  int rows, cols, box_rows, box_cols, stages, active;  // rows: the first `rows` of the matrix are streamed
  int every;                   // 1: every block streams all of them (an activation every block reads, from L2)
};

__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// The rows' bands of box_rows (the last one may run past `rows`: TMA fills what lies past the matrix, and within it
// reads a few rows more) are cut into `active` near-equal contiguous ranges, one a block; a band is streamed box by
// box along its columns. With `every`, each block streams all the bands.
extern "C" __global__ void __launch_bounds__(32, 1) sm_stream(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) unsigned char smem[];
  if (blockIdx.x >= p.active || threadIdx.x != 0) return;
  const unsigned box_bytes = p.box_rows * p.box_cols * 2;
  const uint32_t ring = pl_smem_addr(smem), bars = ring + p.stages * box_bytes;  // mbarriers after the ring
  for (int s = 0; s < p.stages; ++s) pl_mbar_init(bars + 8 * s, 1);
  pl_mbar_init_fence();
  const int bands = (p.rows + p.box_rows - 1) / p.box_rows, steps = p.cols / p.box_cols;
  const int band0 = p.every ? 0 : blockIdx.x * bands / p.active;
  const int total = (p.every ? bands : (blockIdx.x + 1) * bands / p.active - band0) * steps;
  const auto issue = [&](int j) {  // box j: band band0 + j / steps, columns of step j % steps
    const int slot = j % p.stages;
    pl_mbar_arrive_expect_tx(bars + 8 * slot, box_bytes);  // rows past the matrix count too: TMA fills them
    pl_tma_load_2d(ring + slot * box_bytes, &p.map, (j % steps) * p.box_cols, (band0 + j / steps) * p.box_rows,
                   bars + 8 * slot);
  };
  const unsigned long long start = now();
  int issued = 0;
  for (; issued < min(p.stages, total); ++issued) issue(issued);
  for (int j = 0; j < total; ++j) {
    pl_mbar_wait(bars + 8 * (j % p.stages), (j / p.stages) & 1);
    if (issued < total) issue(issued++);  // into the slot just landed: nothing reads it
  }
  p.stamps[2 * blockIdx.x] = start;
  p.stamps[2 * blockIdx.x + 1] = now();
}
"""


def compile_cubin(folder: Path) -> Path:
    """The probe's cubin in ``folder``."""
    return compile_probe(SOURCE, "sm_stream", folder)


def configurations(groups: list[str]) -> list[dict]:
    """Every configuration of the named groups: the matrix (rows, cols), the rows streamed from its start, the
    box, the stages and the active blocks (each an even share of the rows' bands of box rows)."""
    out = []
    qwen, wqkv, wo, act = (51200, 5120), (3072, 2048), (2048, 2048), (64, 2048)
    if "latency" in groups:
        for active in (1, 4, 16):
            for stages in (1, 2, 4, 6, 8, 12):
                out.append({"group": "latency", "matrix": qwen, "rows": 512 * active, "box": (128, 64),
                            "stages": stages, "active": active})
    if "waves" in groups:
        for box_rows, stages in ((128, 6), (144, 6), (208, 4), (256, 4)):
            for active in (48, 64, 68, 92, 115, 124, 132):
                out.append({"group": "waves", "matrix": qwen, "rows": qwen[0], "box": (box_rows, 64),
                            "stages": stages, "active": active})
    if "l2" in groups:  # the B = 64 activation (64 x 2048 bf16, 256 KB), read whole by every busy block from L2, as
        # both projections' blocks do (37 MB for qkv's 96 at 32-row parts, 41 for o-proj's 128 with their weights)
        for active in (96, 128, 132):
            for stages in (4, 8, 16):
                out.append({"group": "l2", "matrix": act, "rows": act[0], "box": (64, 64), "stages": stages,
                            "active": active, "every": True})
    if "decode" in groups:
        # the empty launch: what the flushed timing costs with no bytes
        out.append({"group": "decode", "matrix": wo, "rows": 0, "box": (16, 256), "stages": 1, "active": 0})
        for stages in (4, 8):  # llama_gemv's 32-row parts of Wqkv: 96 blocks, a 16 KB chunk a stage
            out.append({"group": "decode", "matrix": wqkv, "rows": wqkv[0], "box": (32, 256), "stages": stages,
                        "active": 96})
        for stages in (4, 8, 16):  # its 16-row parts of Wo: 128 blocks, 8 KB a stage
            out.append({"group": "decode", "matrix": wo, "rows": wo[0], "box": (16, 256), "stages": stages,
                        "active": 128})
    for c in out:
        cols = c["matrix"][1]
        box_rows, box_cols = c["box"]
        c["in_flight_kb"] = c["stages"] * box_rows * box_cols * 2 / 1024
        c["bytes"] = c["rows"] * cols * 2 * (c["active"] if c.get("every") else 1)  # bytes the SMs receive
        c["name"] = (f"{c['group']}: {c['rows']} rows x {cols}, box {box_rows}x{box_cols} x {c['stages']} "
                     f"({c['in_flight_kb']:.0f} KB), {c['active']} blocks" + (", each all of it" if c.get("every") else ""))
    return out


def block_rows(c: dict):
    """The rows each active block streams (numpy int [active]): its bands, the last one cut at ``rows``."""
    import numpy as np
    if c.get("every"):
        return np.full(c["active"], c["rows"])
    box_rows = c["box"][0]
    bands = -(-c["rows"] // box_rows)
    b = np.arange(c["active"] + 1)
    edges = np.minimum(b * bands // max(c["active"], 1) * box_rows, c["rows"])
    return np.diff(edges)


class Kernel:
    """The cubin loaded through the driver; launch() with one configuration's parameter block."""

    def __init__(self, cubin: Path):
        from cuda.bindings import driver
        from pipelink.runtime import _check, load_function
        self.d, self.check = driver, _check
        _, _, self.module, self.function = load_function(cubin.read_bytes(), "sm_stream", SMEM)

    def launcher(self, c: dict, matrix, stamps):
        """A callable that launches configuration ``c`` on ``matrix`` (a torch bf16 tensor of its shape) on torch's
        current stream, each block's stamps into ``stamps`` (int64 [GRID, 2])."""
        import torch
        from pipelink.abi import TENSOR_MAP_BYTES, Param
        from pipelink.refs import Ref
        from pipelink.runtime import encode_tensor_map
        rows, cols = c["matrix"]
        box_rows, box_cols = c["box"]
        tensor_map = encode_tensor_map(Param(Ref("sm_stream", "matrix"), "bf16", (rows, cols), "read", 0, TENSOR_MAP_BYTES,
                                             tma={"box": [box_rows, box_cols], "swizzle": 128 if box_cols == 64 else 0}),
                                       matrix.data_ptr())
        fields = tensor_map + struct.pack("<Q7i", stamps.data_ptr(), c["rows"], cols, box_rows, box_cols, c["stages"],
                                          c["active"], int(c.get("every", False)))
        # sizeof(Params): the map's 64-byte alignment pads the struct to 192 bytes, all of which the launch copies
        blob = ctypes.create_string_buffer(fields.ljust(PARAMS_BYTES, b"\0"), PARAMS_BYTES)
        args = (ctypes.c_void_p * 1)(ctypes.addressof(blob))

        def launch():
            self.check(self.d.cuLaunchKernel(self.function, GRID, 1, 1, THREADS, 1, 1, SMEM,
                                             torch.cuda.current_stream().cuda_stream, ctypes.addressof(args), 0),
                       "cuLaunchKernel(sm_stream)")
        launch.keep = (blob, args)  # the parameter block lives as long as the callable
        return launch


def block_rates(stamps, c: dict) -> dict:
    """Each active block's time (us) and rate (GB/s) from its stamps, min / median / max."""
    import numpy as np
    t = stamps[: c["active"]].cpu().numpy().astype(np.int64)
    us = (t[:, 1] - t[:, 0]) / 1e3
    share = block_rows(c) * c["matrix"][1] * 2
    rate = share / 1e3 / np.maximum(us, 1e-3)

    def spread(x):
        return {"min": float(x.min()), "median": float(np.median(x)), "max": float(x.max())}
    return {"block_us": spread(us), "block_GBps": spread(rate[share > 0]),
            "ends_after_first_start_us": spread((t[:, 1] - t[:, 0].min()) / 1e3)}


def main() -> None:
    import tempfile
    import torch
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--groups", default="latency,waves,l2,decode")
    args = ap.parse_args()
    configs = configurations(args.groups.split(","))
    kernel = Kernel(compile_cubin(Path(tempfile.mkdtemp(prefix="pipelink-sm-stream-"))))
    flush = timing.l2_flush(l2_flush_bytes())  # what time_interleaved does before each launch
    matrices = {shape: torch.randn(shape, dtype=torch.bfloat16, device="cuda")
                for shape in dict.fromkeys(c["matrix"] for c in configs)}
    records = []
    for group in dict.fromkeys(c["group"] for c in configs):  # each group timed interleaved within itself
        mine = [c for c in configs if c["group"] == group]
        stamps = {c["name"]: torch.zeros((GRID, 2), dtype=torch.int64, device="cuda") for c in mine}
        fns = {c["name"]: kernel.launcher(c, matrices[c["matrix"]], stamps[c["name"]]) for c in mine}
        log(f"{group}: {len(fns)} configurations, {args.reps} launches each")
        times = time_interleaved(fns, args.reps, host_slack_cycles=1 << 21)
        for c in mine:  # a last launch alone for the blocks' own stamps, after a flush: its bytes come from HBM too
            flush()
            fns[c["name"]]()
        torch.cuda.synchronize()
        for c in mine:
            t = times[c["name"]]
            r = {**{k: v for k, v in c.items() if k != "name"}, "name": c["name"], "kernel": t,
                 **(block_rates(stamps[c["name"]], c) if c["active"] else {})}
            r["aggregate_GBps"] = c["bytes"] / 1e6 / t["median_ms"] if c["active"] else None
            if group == "latency":  # Little's law: what a block keeps in flight over the rate it gets
                r["round_trip_us"] = c["in_flight_kb"] * 1024 / 1e3 / r["block_GBps"]["median"]
            records.append(r)
            log(f"  {c['name']}: {t['median_ms'] * 1e3:.1f} us"
                + (f", {r['aggregate_GBps']:.0f} GB/s, a block {r['block_GBps']['median']:.1f} GB/s (median)"
                   if c["active"] else "")
                + (f", round trip {r['round_trip_us']:.2f} us" if "round_trip_us" in r else ""))
    log(f"wrote {write_result('sm_stream', {'grid': GRID, 'dynamic_smem': SMEM, 'configs': records}, args.out)}")


if __name__ == "__main__":
    main()
