// pipelink component ABI (sm_90a). Include this from every component and from the glue.
//
// A component exposes one `extern "C" __device__` function per role and phase:
//     extern "C" __device__ void my_entry(pl_ctx ctx, pl_bind_<component> b, <register ports...>);
// When a package is made, pipelink force-includes this header, the bindings struct generated from the contract
// (`pl_bind_<component>`: an `int` per link-time or guaranteed fact, an `unsigned` per smem buffer byte offset,
// mbarrier array byte offset and named barrier ID, a `const T*`, `T*` or `const pl_tensor_map*` per operand; table in
// docs/guide.md, section 1) and the compile-time facts (`namespace pl_facts`: compile-time facts and each role's size,
// `<role>_warps` and `<role>_threads`). The glue fills the bindings with literals, which nvJitLink LTO folds.
// docs/component_api.md is generated from these comments (docs/generate_component_api.py); the worked examples
// and the ordering rules follow the last declaration. Edit comments in place: moving a line changes every cubin.
#pragma once
#include <stdint.h>

// ---- The call ----

// What the glue tells a component about the current call. `thread` is this thread's index in the kernel role the
// component runs in (0 .. <role>_threads - 1; padding warps never call), the `t` of a register port's fragment. In
// a whole-block phase (scope = "block"): tile, tile_row, tile_col = -1, iter = the block's tiles, thread = threadIdx.x.
struct pl_ctx {
  unsigned char* smem;  // dynamic shared memory base (every offset in the bindings is from here)
  int tile;             // linear tile index in the agreed schedule
  int tile_row;         // tile coordinates in that schedule
  int tile_col;
  int iter;             // calls of this instance before this one, in this block (split: units, some partial)
  int thread;           // thread index within the role (0 .. role threads - 1)
  int last;             // 1 where no later call of this instance in this block is certain: e.g. wait for a store
  // For a component whose contract says how many k-tiles a tile's reduction has ([schedule] k_tiles; 0 for others):
  int k_begin;          // this call's share of the tile's k-tiles: [k_begin, k_end) (whole: 0 .. k_tiles)
  int k_end;
  int stage_base;       // k-tiles this instance streamed in this block before this call: the position in its ring
};

// How every helper below is declared: each unit gets its own inlined copy, so components packed separately never
// clash on a symbol. Declare your own helpers `static __device__` for the same reason.
#define PL_DEVICE static __device__ __forceinline__

// The 32-bit shared-memory address (cvta.to.shared) of a pointer into shared memory, e.g. ctx.smem + b.<buffer>: the
// form every mbarrier, bulk-copy and TMA helper below takes for `bar`, `dst` and `src`.
PL_DEVICE uint32_t pl_smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers ----
// An [[mbarrier]] array is `count` 8-byte barriers; b.<name> is the byte offset of slot 0 (slot i at + 8 i). The glue
// initializes each with the contract's `arrivals` before any component runs. Phase k of a slot has parity k & 1.

// The shared address of slot `slot` of the mbarrier array at byte offset `off` (b.<name>), for the pl_mbar_* calls.
PL_DEVICE uint32_t pl_mbar(const pl_ctx& ctx, unsigned off, int slot) {
  return pl_smem_addr(ctx.smem + off + 8 * slot);
}
// Initializes the mbarrier at `bar` to expect `arrivals` arrivals per phase. The glue's job: in a
// component it is a conformance error (a second init resets the phase), except on mbarriers kept
// inside one of its own buffers named under [reserve] mbarriers_in.
PL_DEVICE void pl_mbar_init(uint32_t bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes the mbarrier initializations before it visible to the cluster and to the TMA engine; the
// glue issues it after its initializations.
PL_DEVICE void pl_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Arrives once on `bar` (release: this thread's shared-memory accesses before it are visible to the threads whose wait
// then completes). Call it after your last access to what it guards; if `arrivals` counts warps: __syncwarp(), lane 0.
PL_DEVICE void pl_mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Arrives once on `bar` and adds `bytes` to the transaction bytes its phase waits for, which copies (pl_bulk_g2s,
// pl_tma_load_2d) complete on it. Call it before those copies; a constant `bytes` is checked against tx_bytes.
PL_DEVICE void pl_mbar_arrive_expect_tx(uint32_t bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Whether the phase of `bar` with parity `parity` has completed (acquire, when it has): one test, which the hardware
// may hold for a while before it answers no. pl_mbar_wait loops on it.
PL_DEVICE bool pl_mbar_try_wait(uint32_t bar, unsigned parity) {
  uint32_t ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}
#ifndef PL_SANITIZE
// Waits until the phase of `bar` with parity `parity` has completed, with acquire semantics: what the arriving threads
// did before arriving, and the bytes the copies completed, are visible after it. A fresh mbarrier counts as having
// completed the phase before phase 0: waiting on parity 1 returns at once (how a producer's first pass gets through).
PL_DEVICE void pl_mbar_wait(uint32_t bar, unsigned parity) {
  while (!pl_mbar_try_wait(bar, parity)) {
  }
}
#else
// Sanitize builds (pipelink link --sanitize recompiles open components with PL_SANITIZE): the glue
// defines this function (it owns the report buffer); it reports the barrier a thread waited on for
// 2 s without a phase change, and traps.
extern "C" __device__ void pl_sanitize_stuck(uint32_t bar, unsigned parity);
// Sanitize builds: nanoseconds from %globaltimer, the clock of the bounded wait.
PL_DEVICE unsigned long long pl_sanitize_clock() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
// Sanitize builds: the same wait, bounded: after 2 s without the phase it calls pl_sanitize_stuck,
// which reports and traps instead of hanging.
PL_DEVICE void pl_mbar_wait(uint32_t bar, unsigned parity) {
  const unsigned long long start = pl_sanitize_clock();
  while (!pl_mbar_try_wait(bar, parity)) {
    if (pl_sanitize_clock() - start > 2000000000ull) pl_sanitize_stuck(bar, parity);
  }
}
#endif

// ---- Bulk copies ----
// The TMA engine's 1-D form (no tensor map): the operand is a plain `const T*` binding, the bytes land on an mbarrier.

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` to shared memory at `dst`, and
// completes `bytes` transaction bytes on mbarrier `bar`: announce them first with pl_mbar_arrive_expect_tx(bar, ...).
PL_DEVICE void pl_bulk_g2s(uint32_t dst, const void* src, unsigned bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// ---- Tensor copies ----
// The TMA engine with a tensor map ([[operand]] tma = {box, swizzle}). Coordinates are innermost first, in elements.

// A CUtensorMap's 128 opaque bytes. The runtime encodes it at launch from the caller's tensor (cuTensorMapEncodeTiled,
// with the contract's box and swizzle) into the kernel's `__grid_constant__` parameter struct; the binding is a
// `const pl_tensor_map*` to it, the parameter-space address TMA instructions take: pass it on, never copy the map.
struct alignas(64) pl_tensor_map {
  unsigned long long opaque[16];
};
// Copies one box of a 2-D tensor map to shared memory at `dst` and completes its bytes on mbarrier `bar` (announce them
// first: pl_mbar_arrive_expect_tx). c0 is the innermost (column) coordinate, c1 the row, both in elements: with
// box = [rows, cols], box (i, j) starts at c0 = j * cols, c1 = i * rows. `dst` 128-byte aligned, 1024 for swizzle 128.
PL_DEVICE void pl_tma_load_2d(uint32_t dst, const pl_tensor_map* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
// Copies one box from shared memory at `src` to the 2-D tensor map at (c0, c1) (innermost first, in elements), in the
// issuing thread's bulk async-group. Order: the writers of `src` each run pl_fence_proxy_async(), then a named barrier
// with the issuing thread, which stores, pl_bulk_commit(), pl_bulk_wait_read(); only then may `src` change.
PL_DEVICE void pl_tma_store_2d(const pl_tensor_map* map, uint32_t src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(src) : "memory");
}
// Closes the issuing thread's bulk async-group: the pl_tma_store_2d copies since the last commit, which
// pl_bulk_wait_read then waits for. Call it after the stores and before the wait, in the thread that issued them.
PL_DEVICE void pl_bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until every committed bulk group of this thread has finished reading shared memory (the global writes may still
// be in flight): `src` may then be rewritten. Others learn it from a barrier this thread reaches after it.
PL_DEVICE void pl_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// Asks L2 for the box of the 2-D tensor map at (c0, c1), as pl_tma_load_2d would copy it, without shared memory or an
// mbarrier: a phase that must first wait (a grid barrier) can start its reads of data nobody writes meanwhile.
PL_DEVICE void pl_tma_prefetch_2d(const pl_tensor_map* map, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1) : "memory");
}
// Prefetches the tensor map so that its fetch is off the first copy's path: once per block (ctx.iter == 0) will do.
PL_DEVICE void pl_tma_prefetch_map(const pl_tensor_map* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- Thread-block clusters ----
// [launch] cluster in the link spec; a component that needs one requires the fact cluster_ctas.

// This block's rank in its cluster (0 .. cluster_ctas - 1).
PL_DEVICE unsigned pl_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Every thread of every block of the cluster, convergent (release / acquire: smem writes and mbarrier inits before it
// are visible to the peers after it). With [launch] cluster > 1 the glue runs it at the kernel's start and end.
PL_DEVICE void pl_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// Arrives once on the mbarrier at the same smem address in block `rank` of the cluster (`rank` may be this block).
PL_DEVICE void pl_mbar_arrive_cluster(uint32_t bar, unsigned rank) {
  asm volatile(
      "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" ::"r"(bar), "r"(rank) : "memory");
}
// pl_tma_load_2d, delivered to the same smem offset in every block of `mask` (bit i = rank i), each completing the
// bytes on its own mbarrier at offset `bar`: each receiving block's expect_tx counts them (gemm_mainloop: all of B).
PL_DEVICE void pl_tma_load_2d_multicast(uint32_t dst, const pl_tensor_map* map, int c0, int c1, uint32_t bar,
                                        uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}

// ---- Named barriers ----
// IDs 1..15 (0 is `__syncthreads`). Pass b.<name> itself to each call (for a choice at run time, branch: one call per
// barrier, so that every bar.sync gets its ID as an immediate) and the contract's `threads` (a multiple of 32, the same
// in every call). Both are checked against the contract; a barrier no BAR shows as an immediate fails post-link.

// Waits until `threads` threads, this one included, have arrived at barrier `id` (bar.sync or bar.arrive); their
// shared-memory accesses before it are visible after it. Call it in all lanes of each warp taking part (.aligned).
PL_DEVICE void pl_bar_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at barrier `id` without waiting: the producer side of a hand-over whose consumers pl_bar_sync on it with the
// same `threads`, which counts both sides (the arriving and the waiting threads).
PL_DEVICE void pl_bar_arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- Register budgets ----
// setmaxnreg acts on a whole warpgroup and needs `__launch_bounds__(threads, 1)` on the kernel (the
// glue's). The glue sets each role's `registers`; a component that manages its own warpgroups lists
// its values under the role's internal_setmaxnreg.

// Raises this warpgroup's per-thread register budget to N, waiting until the block has them free (all 128 threads).
template <int N>
PL_DEVICE void pl_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }
// Lowers this warpgroup's per-thread register budget to N, releasing the rest to the block (all 128 threads).
template <int N>
PL_DEVICE void pl_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }

// ---- Proxies and lanes ----

// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads of them (a TMA store's `src`,
// WGMMA operands): every writing thread runs it after its writes and before the barrier that hands the buffer over.
PL_DEVICE void pl_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// This thread's lane in its warp (0..31).
PL_DEVICE int pl_lane() { return threadIdx.x & 31; }

// ---- Grid-wide ----
// Blocks coordinate through a counter in a [[workspace]] declared with `grid_sync = true`, and the link then requires
// every block to be resident at once (a persistent grid of at most one block per SM), or a block would wait for one
// that never runs. pl_grid_sync counts up within a launch (its workspace `zero`: cleared before every launch);
// pl_grid_barrier leaves its counter as it found it (its workspace `zero_once`: cleared before the first launch).

// Grid-wide barrier, use number `k` (1, 2, ... for successive uses of one counter in a launch): one thread per block
// (in a whole-block phase, between __syncthreads) arrives and waits until k * gridDim.x arrivals. Writes of every
// block before its arrival are visible to every block after its wait (release on arrival, acquire on the wait).
PL_DEVICE void pl_grid_sync(unsigned char* counter, unsigned k) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");  // no fence.sc: release suffices
  unsigned seen;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
  } while (seen < k * gridDim.x);
}

// Grid-wide barrier on a counter it leaves as it found it: its [[workspace]] is declared `zero_once` (cleared before
// the runtime's first launch only, where pl_grid_sync's needs a memset before every launch, about a microsecond of a
// decode step). One thread per block (in a whole-block phase, between __syncthreads) arrives and waits for every
// block's arrival, any number of times a launch. Block 0 adds 2^31 - (gridDim.x - 1) and every other block 1: the
// arrivals sum to 2^31, so the counter's top bit flips when the last one lands and its low 31 bits are 0 again for the
// next use, in this launch or the next (cooperative groups' grid sync counts the same way). Writes of every block
// before its arrival are visible to every block after its wait (release on arrival, acquire on the wait).
PL_DEVICE void pl_grid_barrier(unsigned char* counter) {
  const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
  unsigned before, seen;
  asm volatile("atom.release.gpu.global.add.u32 %0, [%1], %2;" : "=r"(before) : "l"(counter), "r"(add) : "memory");
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
  } while (((seen ^ before) & 0x80000000u) == 0);
}

// An int written by another block, read with acquire semantics (after a pl_grid_sync that ordered it).
PL_DEVICE int pl_ld_acquire_int(const unsigned char* at) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(at) : "memory");
  return v;
}

// ---- Example (mbarriers): a TMA ring, producer and consumer ----
// From components/raw/ring_producer.cu and ring_reduce.cu (the demo). The ring is one [[smem]] buffer of `stages`
// slots and two [[mbarrier]] arrays of `stages` barriers, declared alike by both sides: "full" (arrivals = 1,
// tx_bytes = one stage's bytes) and "empty" (arrivals = the consumer's warps). Each side numbers the stages it passes
// in this block, n, across tiles (ctx.iter carries on): stage n uses slot n % stages, in that slot's phase
// n / stages, whose parity is (n / stages) & 1.
//
// The producer, one thread: wait until the consumers have freed the slot (the opposite parity, so the first pass
// goes straight through), announce the bytes on "full", start the copy that completes them.
//
//     const int n = ctx.iter * k_boxes + c;  // position in this block's stream of stages
//     const int stage = n % b.stages;
//     pl_mbar_wait(pl_mbar(ctx, b.empty, stage), ((n / b.stages) & 1) ^ 1);
//     const uint32_t full = pl_mbar(ctx, b.full, stage);
//     pl_mbar_arrive_expect_tx(full, stage_bytes);  // b.box_rows * b.box_cols * 4u: the contract's tx_bytes
//     pl_tma_load_2d(ring + stage * stage_bytes, b.x, c * b.box_cols, ctx.tile_row * b.box_rows, full);
//
// The consumer, 8 warps: wait for the bytes, read the slot, then free it with one arrival per warp.
//
//     pl_mbar_wait(pl_mbar(ctx, b.full, stage), (n / b.stages) & 1);
//     const float4* tile = ring + stage * (stage_floats / 4) + row0 * kQuads + quad;
//     for (int r = 0; r < kReads; ++r) { const float4 x = tile[r * kRowStep * kQuads]; /* ... */ }
//     __syncwarp();  // the lanes' reads come before lane 0's arrive, which releases them
//     if ((ctx.thread & 31) == 0) pl_mbar_arrive(pl_mbar(ctx, b.empty, stage));
//
// In the producer `ring` is `pl_smem_addr(ctx.smem + b.ring)`; in the consumer it is the generic pointer
// `reinterpret_cast<const float4*>(ctx.smem + b.ring)`.

// ---- Example (Bulk copies): a 1-D ring producer ----
// From components/raw/bulk_producer.cu: the same ring filled from a plain pointer (b.x is a `const float*`), one bulk
// copy of `chunk` floats per stage (chunk is a multiple of 4, so every copy is a multiple of 16 bytes). The consumer
// side is the mbarriers example's.
//
//     const float* src = b.x + static_cast<long long>(ctx.tile) * b.tile;
//     pl_mbar_wait(pl_mbar(ctx, b.empty, stage), ((n / b.stages) & 1) ^ 1);
//     const uint32_t full = pl_mbar(ctx, b.full, stage);
//     pl_mbar_arrive_expect_tx(full, stage_bytes);  // b.chunk * 4u: the contract's tx_bytes
//     pl_bulk_g2s(ring + stage * stage_bytes, src + c * b.chunk, stage_bytes, full);

// ---- Example (Tensor copies): a TMA store from a staging tile ----
// From components/raw/swiglu_store.cu: the store role's 8 warps write a bf16 tile into the [[smem]] buffer `staging`
// (boxes of 128 rows x 64 columns, in the 128B-swizzled layout, align = 1024), and thread 0 stores it with the TMA
// engine to the operand y (tma = { box = [128, 64], swizzle = 128 }). The [[named_barrier]] `staged`
// (threads = "store_threads") separates the steps:
//
//     pl_bar_sync(b.staged, kThreads);  // 1. the previous tile's TMA stores have read staging
//     /* ... every thread writes its values into staging ... */
//     pl_fence_proxy_async();           // 2. these generic-proxy writes are read by the TMA (async proxy)
//     pl_bar_sync(b.staged, kThreads);  // 3. the whole tile is staged
//     if (t == 0) {
//       const uint32_t src = pl_smem_addr(staging);
//       for (int box = 0; box < kBoxes; ++box)  // 4. one store per box: c0 = column, c1 = row
//         pl_tma_store_2d(b.y, src + box * kBoxBytes, ctx.tile_col * kOutCols + box * kBoxCols, ctx.tile_row * kTileM);
//       pl_bulk_commit();                // 5. close the group of stores
//       pl_bulk_wait_read();             // 6. staging may be rewritten (and the block may exit) once it has been read
//     }
//
// Without the fence (2) the TMA may read bytes the threads' writes have not reached yet; without the barrier (3),
// bytes not yet written. Step 1 is what turns the wait (6) into a guarantee for all threads: thread 0 reaches the next
// tile's first barrier only after its wait, so nobody rewrites staging before the stores have read it. Each thread
// writes its values of tile row `row`, 16-byte chunk `chunk` to their 128B-swizzled place (guide.md, TMA layouts):
//
//     staging + box * kBoxBytes + row * 128 + (((chunk % 8) ^ (row % 8)) * 16) + (lane % 4) * 4

// ---- Example (Thread-block clusters): one tile multicast to both blocks ----
// From components/cutlass/gemm_mainloop.cu with [launch] cluster = 2: the two blocks of a cluster need the same tile of
// B. Each loads half of it into both blocks' rings, at the same offset, so each block's "full" barrier expects all of
// A and B; a stage is free once the consumer warps of both blocks released it (the contract's "empty" arrivals are
// consumer_warps * cluster_ctas).
//
//     const unsigned rank = b.cluster_ctas > 1 ? pl_cluster_rank() : 0;
//     const int b_rows = kTileN / b.cluster_ctas;  // rows of B this block loads
//     pl_mbar_arrive_expect_tx(full, kStageBytesA + kStageBytesB);  // all of B arrives, from every block
//     pl_tma_load_2d(ring_a + stage * kStageBytesA, b.a, k * kTileK, ctx.tile_row * kTileM, full);
//     pl_tma_load_2d_multicast(ring_b + stage * kStageBytesB + rank * b_rows * kTileK * 2, b.b, k * kTileK,
//                              ctx.tile_col * kTileN + rank * b_rows, full, everyone);  // everyone = 0b11
//     /* consumer, one lane per warp, when done with the stage: */
//     for (int peer = 0; peer < b.cluster_ctas; ++peer) pl_mbar_arrive_cluster(empty, peer);

// ---- Example (Named barriers): a barrier the linker places ----
// The contract declares the barrier and who takes part; swiglu_store.toml: `[[named_barrier]] name = "staged"`,
// `threads = "store_threads"` (its 8 warps). The code passes the binding and that count at every call
// (components/raw/swiglu_store.cu, kThreads = pl_facts::store_threads):
//
//     pl_bar_sync(b.staged, kThreads);  // the previous tile's TMA stores have read staging
//
// After LTO the call is a BAR.SYNC with the linker's ID and 0x100 (256 threads) as immediates. tile_store pins its
// barrier (`id = 1`, as CUTLASS does) and still passes b.done. To choose a barrier at run time, branch, so that each
// call keeps an immediate ID; `pl_bar_sync(wg ? b.wg1 : b.wg0, 128)` leaves the ID in a register, which fails the
// post-link check (`pipelink link`: PostLinkError). Not from a bundled component; tests/include/test_component_api.py links
// a two-warpgroup component both ways:
//
//     if (wg == 0) pl_bar_sync(b.wg0, 128); else pl_bar_sync(b.wg1, 128);

// ---- Ordering rules ----
// The rules the examples follow, in one place.
//
// - **mbarrier ring, producer** (one thread): `pl_mbar_wait(empty slot, parity ^ 1)`, then
//   `pl_mbar_arrive_expect_tx(full slot, bytes)`, then the copies that complete on it (`pl_tma_load_2d`,
//   `pl_bulk_g2s`). The bytes announced equal the contract's `tx_bytes` and what the copies move.
// - **mbarrier ring, consumer**: `pl_mbar_wait(full slot, parity)`, read the slot, `__syncwarp()`, then one lane per
//   warp `pl_mbar_arrive(empty slot)` where the contract's `arrivals` counts warps (every thread where it counts
//   threads).
// - **Parity**: the k-th phase of a slot (k = 0, 1, ...) has parity `k & 1`. Who waits for data waits `k & 1`; who
//   waits for the slot to be free waits `(k & 1) ^ 1`, which a fresh mbarrier lets through on the first pass.
// - **Never `pl_mbar_init`**: the glue has initialized every declared mbarrier before the first call.
// - **TMA store**: each thread writing the staging buffer runs `pl_fence_proxy_async()` after its writes; then a
//   named barrier over the writers and the issuing thread; then the issuing thread runs `pl_tma_store_2d` (one per
//   box), `pl_bulk_commit()`, `pl_bulk_wait_read()`. Only after that wait may the buffer be rewritten (a barrier the
//   issuing thread reaches after it tells the others) or the block exit.
// - **Async-proxy reads of what threads wrote** (a TMA store's source, WGMMA operands): `pl_fence_proxy_async()`
//   after the writes, before the barrier that hands the buffer over.
// - **Named barriers**: `b.<name>` as the ID of every call (branch for a choice at run time); the contract's
//   `threads` at every call, in all lanes of each warp taking part; `pl_bar_arrive` on one side and `pl_bar_sync` on
//   the other for a one-way hand-over, with `threads` counting both sides.
// - **No `__syncthreads()`** in a role of a warp-specialized block (the other roles never arrive); only in a
//   whole-block phase (`[[entry]] scope = "block"`).
// - **Register budgets**: the glue sets each role's `registers`; a component calls `pl_setmaxnreg_*` only with the
//   values its role lists under `internal_setmaxnreg`, in all 128 threads of the warpgroup.
