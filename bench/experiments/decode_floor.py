"""What one decode-block kernel costs before it computes anything: the floor under the Llama decode
block's L = 16 target (issue 14: >= 2x the fastest torch path), measured by the same timing the table
uses (launch by launch, L2 flushed before each, the host's enqueue hidden behind a GPU spin) and under
CUDA graph replay (L2 warm).

    python bench/experiments/decode_floor.py [--out DIR]

The kernels have the decode block's launch shape (132 blocks of 256 threads, 196,736 bytes of dynamic
smem, so one block per SM) and do only its skeleton: nothing; k grid barriers (pl_grid_barrier, the
block's own); reading the block's 21 MB of weights (Wqkv 12.6 MB, Wo 8.4 MB; each block a contiguous
share) with 16-byte loads, 8 or all of a thread's share in flight, or with every byte first asked of L2 by bulk
prefetches at the kernel's start; and that read cut by the two grid barriers of the block at L = 16
(qkv | attention | o-proj), with nothing between them. The fastest "weights + 2 barriers" is what
the linked block cannot go below without changing its structure (o-proj's weights may be asked for
before the barriers, as the prefetched form does; what it computes may not cross them); the block's
measured time less that is what its computation and waits cost. Writes
results/decode_floor-<gpu>-<stamp>.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import compile_probe, graph_replay_us, log, time_interleaved, write_result  # noqa: E402

GRID, THREADS, SMEM = 132, 256, 196736
WQKV_BYTES, WO_BYTES = 3072 * 2048 * 2, 2048 * 2048 * 2

SOURCE = r"""
#include <pipelink/component.h>  // pl_grid_barrier: the decode block's own barrier

// Block b's contiguous share [begin, end) of `vecs` 16-byte words.
__device__ __forceinline__ void share(long long vecs, long long& begin, long long& end) {
  const long long per = (vecs + gridDim.x - 1) / gridDim.x;
  begin = min(vecs, per * blockIdx.x);
  end = min(vecs, begin + per);
}

// Asks L2 for this block's share (cp.async.bulk.prefetch.L2, from one thread, in 64 KB requests): every byte the
// block will read is requested at once, before any load of it.
__device__ __forceinline__ void prefetch_share(const uint4* p, long long vecs) {
  long long begin, end;
  share(vecs, begin, end);
  if (threadIdx.x != 0) return;
  for (long long v = begin; v < end; v += 4096) {
    const unsigned bytes = static_cast<unsigned>(min(4096LL, end - v) * 16);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + v), "r"(bytes) : "memory");
  }
}

// This block's share of `vecs` 16-byte words, kInFlight loads in flight a thread: each round's loads are all
// issued before the first is used, the last round's predicated (an unrolled tail; a plain loop for the rest of
// the share would wait out one L2 or HBM round trip per load, as the first form of this kernel did).
template <int kInFlight>
__device__ __forceinline__ float stream(const uint4* __restrict__ p, long long vecs) {
  float acc = 0.f;
  long long begin, end;
  share(vecs, begin, end);
  const int stride = blockDim.x;
  for (long long i = begin + threadIdx.x; i < end; i += kInFlight * stride) {
    uint4 v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u)
      v[u] = i + u * stride < end ? __ldg(p + i + u * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) acc += __uint_as_float(v[u].x ^ v[u].y ^ v[u].z ^ v[u].w);
  }
  return acc;
}

// Reads a (the qkv weights), crosses `barriers` grid barriers, reads b (o-proj's); with `prefetch`, both shares
// are first requested from L2 at once (the most a block can do to keep its two reads from being cut by the
// barriers: o-proj's weights do not depend on anything the block computes).
template <int kInFlight>
__device__ __forceinline__ void skeleton(const uint4* __restrict__ a, long long a_vecs, const uint4* __restrict__ b,
                                         long long b_vecs, unsigned* counter, int barriers, int prefetch,
                                         float* sink) {
  if (prefetch) {
    prefetch_share(a, a_vecs);
    prefetch_share(b, b_vecs);
  }
  float acc = stream<kInFlight>(a, a_vecs);
  for (int k = 0; k < barriers; ++k) {
    __syncthreads();
    if (threadIdx.x == 0) pl_grid_barrier(reinterpret_cast<unsigned char*>(counter));
    __syncthreads();
  }
  acc += stream<kInFlight>(b, b_vecs);
  if (acc == 12345.f) sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;  // keeps the loads; never true in practice
}

// extern __shared__ is unused: the launch's size sets one block per SM, as the block's does.
extern "C" __global__ void __launch_bounds__(256, 1)
decode_floor_8(const uint4* a, long long a_vecs, const uint4* b, long long b_vecs, unsigned* counter, int barriers,
               int prefetch, float* sink) {
  skeleton<8>(a, a_vecs, b, b_vecs, counter, barriers, prefetch, sink);
}

extern "C" __global__ void __launch_bounds__(256, 1)
decode_floor_40(const uint4* a, long long a_vecs, const uint4* b, long long b_vecs, unsigned* counter, int barriers,
                int prefetch, float* sink) {
  skeleton<40>(a, a_vecs, b, b_vecs, counter, barriers, prefetch, sink);
}
"""


def _compile():
    """The kernels, built by the project's nvcc (harness.compile_probe) and loaded by cupy."""
    import tempfile
    import cupy
    cubin = compile_probe(SOURCE, "floor", Path(tempfile.mkdtemp(prefix="pipelink-decode-floor-")))
    module = cupy.RawModule(path=str(cubin))
    return {depth: module.get_function(f"decode_floor_{depth}") for depth in (8, 40)}


def main() -> None:
    import cupy
    import torch
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--reps", type=int, default=400)
    args = ap.parse_args()
    kernels = _compile()
    for kernel in kernels.values():
        kernel.max_dynamic_shared_size_bytes = SMEM
    wqkv = torch.randint(0, 1 << 15, (WQKV_BYTES // 2,), dtype=torch.int16, device="cuda")
    wo = torch.randint(0, 1 << 15, (WO_BYTES // 2,), dtype=torch.int16, device="cuda")
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")  # the flip barrier leaves it as it found it
    sink = torch.empty(GRID * THREADS, dtype=torch.float32, device="cuda")

    def launcher(read: bool, barriers: int, in_flight: int = 8, prefetch: bool = False):
        a_vecs = WQKV_BYTES // 16 if read else 0
        b_vecs = WO_BYTES // 16 if read else 0
        kernel = kernels[in_flight]
        # torch's buffers seen by cupy through the CUDA array interface (no copy): passed as their pointers
        launch_args = (cupy.asarray(wqkv), cupy.int64(a_vecs), cupy.asarray(wo), cupy.int64(b_vecs),
                       cupy.asarray(counter), cupy.int32(barriers), cupy.int32(int(prefetch)), cupy.asarray(sink))

        def fn():
            with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                kernel((GRID,), (THREADS,), launch_args, shared_mem=SMEM)
        return fn

    # "weights": 8 loads in flight a thread (4.3 MB over the grid, five rounds); "all in flight": 40, so each
    # thread's whole share of each matrix (at most 24 + 16 words) is asked for at once; "prefetched": every byte
    # also asked of L2 at the start by bulk prefetches, so o-proj's share streams in before and across the barriers.
    fns = {"empty": launcher(False, 0), "1 barrier": launcher(False, 1), "2 barriers": launcher(False, 2),
           "3 barriers": launcher(False, 3), "weights": launcher(True, 0), "weights + 2 barriers": launcher(True, 2),
           "weights, all in flight": launcher(True, 0, 40),
           "weights + 2 barriers, all in flight": launcher(True, 2, 40),
           "weights, prefetched": launcher(True, 0, 40, True),
           "weights + 2 barriers, prefetched": launcher(True, 2, 40, True)}
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    assert int(counter.item()) & 0x7FFFFFFF == 0, "the barrier left its counter's low bits set"
    flushed = time_interleaved(fns, args.reps, host_slack_cycles=1 << 21)
    graph = {name: graph_replay_us(fn) for name, fn in fns.items()}
    weights = (WQKV_BYTES + WO_BYTES) / 1e9
    result = {"grid": GRID, "threads": THREADS, "dynamic_smem": SMEM, "weight_bytes": WQKV_BYTES + WO_BYTES,
              "kernels": {name: {"flushed_median_us": t["median_ms"] * 1e3, "graph_warm_l2_us": graph[name],
                                 **({"flushed_GBps": weights / (t["median_ms"] * 1e-3)} if "weights" in name else {})}
                          for name, t in flushed.items()},
              "raw": {name: t for name, t in flushed.items()}}
    for name, r in result["kernels"].items():
        log(f"{name}: flushed {r['flushed_median_us']:.2f} us, graph replay {r['graph_warm_l2_us']:.2f} us"
            + (f", {r['flushed_GBps']:.0f} GB/s flushed" if "flushed_GBps" in r else ""))
    log(f"wrote {write_result('decode_floor', result, args.out)}")


if __name__ == "__main__":
    main()
