// moe_bwd_gather: the permute's and the router's backward, a whole-block phase after the backward GEMM's tile loops,
// in every thread of every block. Shipped closed (packed with --closed). A grid barrier first: every dxp row is
// stored (the kind 2 tiles' epilogues) and, long before, the combine's dchosen and the plan's offsets.
//   dx[t, :]  = sum_s dxp[token_row[t, s], :] + sum_s dchosen[t, s] wr[ids[t, s], :]
//               one warp per token (grid-strided), fp32 sums in slot order (the dxp rows, then the router terms),
//               kColsPerLane columns per lane per step, bf16 out.
//   dwr[e, :] = sum over the rows r of expert e (offsets[e] .. offsets[e + 1]) holding a token t = row_token[r] >= 0
//               of dchosen[t, s] x[t, :], s the slot with token_row[t, s] == r.
//               A unit is (expert, a chunk of 32 x kColsPerLane columns); a block takes units blockIdx.x, + gridDim.x,
//               ...; its warps take kDwrRowsPerWarp consecutive rows of the expert at a time, round-robin (the
//               lanes look up one row each: token and dchosen), each summing its rows in order into fp32 registers;
//               then the warps' sums are added in warp order through smem. A fixed order for a fixed block size:
//               the same bits every run, no float atomics. An expert without rows gets zeros.

#include <cuda_bf16.h>

namespace {
// Tunable: bf16 columns a lane moves per step (2, 4 or 8: a 4-, 8- or 16-byte vector), in dx and in dwr.
constexpr int kColsPerLane = 8;
// Tunable: consecutive rows of an expert a warp sums at a time in dwr (1..32: one row per lane is looked up).
constexpr int kDwrRowsPerWarp = 32;

constexpr int kMaxTopk = 8;                  // the contract's topk range
constexpr int kPartialBytesPerThread = 32;   // the contract's [[smem]] partial: block_threads * 32 bytes
static_assert(kColsPerLane == 2 || kColsPerLane == 4 || kColsPerLane == 8, "a lane moves 4, 8 or 16 bytes");
static_assert(kDwrRowsPerWarp >= 1 && kDwrRowsPerWarp <= 32, "one row per lane is looked up");
static_assert(kColsPerLane * 4 <= kPartialBytesPerThread, "each thread's fp32 partial sums fit its share of partial");

struct alignas(2 * kColsPerLane) Vec {
  __nv_bfloat162 p[kColsPerLane / 2];
};
// The builtin type of a Vec's bytes, for the read-only (non-coherent) loads of the inputs.
template <int kBytes> struct RawOf;
template <> struct RawOf<4> { using type = unsigned; };
template <> struct RawOf<8> { using type = uint2; };
template <> struct RawOf<16> { using type = int4; };
using Raw = RawOf<sizeof(Vec)>::type;

// A vector of an input of the launch (x, wr: never written in it), through the read-only path.
static __device__ Vec load_input(const __nv_bfloat16* at) {
  const Raw raw = __ldg(reinterpret_cast<const Raw*>(at));
  return *reinterpret_cast<const Vec*>(&raw);
}

static __device__ void add_scaled(float (&acc)[kColsPerLane], float scale, const Vec& v) {
#pragma unroll
  for (int i = 0; i < kColsPerLane / 2; ++i) {
    const float2 x = __bfloat1622float2(v.p[i]);
    acc[2 * i] = fmaf(scale, x.x, acc[2 * i]);
    acc[2 * i + 1] = fmaf(scale, x.y, acc[2 * i + 1]);
  }
}

static __device__ void add(float (&acc)[kColsPerLane], const Vec& v) {
#pragma unroll
  for (int i = 0; i < kColsPerLane / 2; ++i) {
    const float2 x = __bfloat1622float2(v.p[i]);
    acc[2 * i] += x.x;
    acc[2 * i + 1] += x.y;
  }
}

static __device__ Vec pack(const float (&acc)[kColsPerLane]) {
  Vec v;
#pragma unroll
  for (int i = 0; i < kColsPerLane / 2; ++i) v.p[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  return v;
}
}  // namespace

extern "C" __device__ void moe_bwd_gather_t(pl_ctx ctx, pl_bind_moe_bwd_gather b) {
  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 1);  // every dxp row is stored
  __syncthreads();

  // Written in this launch (plain loads): dxp, dchosen, offsets. The saved routing and x are inputs.
  const __nv_bfloat16* dxp = reinterpret_cast<const __nv_bfloat16*>(b.dxp);
  const float* dchosen = reinterpret_cast<const float*>(b.dchosen);
  const int* offsets = reinterpret_cast<const int*>(b.offsets);
  const int* ids = reinterpret_cast<const int*>(b.ids);
  const int* token_row = reinterpret_cast<const int*>(b.token_row);
  const int* row_token = reinterpret_cast<const int*>(b.row_token);
  const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(b.tokens);
  const int lane = ctx.thread % 32, warp = ctx.thread / 32, warps = blockDim.x / 32;
  const int vecs = b.H / kColsPerLane;

  // dx: one warp per token.
  for (int t = blockIdx.x * warps + warp; t < b.T; t += gridDim.x * warps) {
    int my_row = 0, my_id = 0;
    float my_g = 0.f;
    if (lane < b.topk) {
      const size_t at = static_cast<size_t>(t) * b.topk + lane;
      my_row = __ldg(token_row + at);
      my_id = __ldg(ids + at);
      my_g = dchosen[at];
    }
    int row[kMaxTopk], id[kMaxTopk];
    float g[kMaxTopk];
#pragma unroll
    for (int s = 0; s < kMaxTopk; ++s) {
      row[s] = __shfl_sync(0xffffffffu, my_row, s);
      id[s] = __shfl_sync(0xffffffffu, my_id, s);
      g[s] = __shfl_sync(0xffffffffu, my_g, s);
    }
    for (int c = lane; c < vecs; c += 32) {
      const size_t col = static_cast<size_t>(c) * kColsPerLane;
      float acc[kColsPerLane];
#pragma unroll
      for (int i = 0; i < kColsPerLane; ++i) acc[i] = 0.f;
#pragma unroll
      for (int s = 0; s < kMaxTopk; ++s)
        if (s < b.topk) add(acc, *reinterpret_cast<const Vec*>(dxp + static_cast<size_t>(row[s]) * b.H + col));
#pragma unroll
      for (int s = 0; s < kMaxTopk; ++s)
        if (s < b.topk)
          add_scaled(acc, g[s], load_input(b.wr + static_cast<size_t>(id[s]) * b.H + col));
      *reinterpret_cast<Vec*>(b.dx + static_cast<size_t>(t) * b.H + col) = pack(acc);
    }
  }

  // dwr: units (expert, chunk of 32 x kColsPerLane columns), a block each; the loop is block-uniform (its barriers).
  float* partial = reinterpret_cast<float*>(ctx.smem + b.partial);  // [warp][column in the lane's vector][lane]
  const int chunks = (vecs + 31) / 32;
  for (int u = blockIdx.x; u < b.E * chunks; u += gridDim.x) {
    const int e = u / chunks;
    const int c = u % chunks * 32 + lane;  // this lane's vector of columns
    const bool active = c < vecs;
    const size_t col = static_cast<size_t>(c) * kColsPerLane;
    const int begin = offsets[e], end = offsets[e + 1];
    float acc[kColsPerLane];
#pragma unroll
    for (int i = 0; i < kColsPerLane; ++i) acc[i] = 0.f;
    for (int r0 = begin + warp * kDwrRowsPerWarp; r0 < end; r0 += warps * kDwrRowsPerWarp) {
      // Lane j looks up row r0 + j: its token (-1: none) and that slot's dchosen.
      int tok = -1;
      float gj = 0.f;
      const int r = r0 + lane;
      if (lane < kDwrRowsPerWarp && r < end) {
        tok = __ldg(row_token + r);
        if (tok >= 0) {
          const size_t first = static_cast<size_t>(tok) * b.topk;
          for (int s = 0; s < b.topk; ++s)
            if (__ldg(token_row + first + s) == r) gj = dchosen[first + s];
        }
      }
#pragma unroll 4
      for (int j = 0; j < kDwrRowsPerWarp; ++j) {
        const int tj = __shfl_sync(0xffffffffu, tok, j);
        const float sj = __shfl_sync(0xffffffffu, gj, j);
        if (tj >= 0 && active)
          add_scaled(acc, sj, load_input(x + static_cast<size_t>(tj) * b.H + col));
      }
    }
#pragma unroll
    for (int i = 0; i < kColsPerLane; ++i) partial[(warp * kColsPerLane + i) * 32 + lane] = acc[i];
    __syncthreads();
    if (warp == 0 && active) {
#pragma unroll
      for (int i = 0; i < kColsPerLane; ++i) acc[i] = partial[i * 32 + lane];
      for (int w = 1; w < warps; ++w) {
#pragma unroll
        for (int i = 0; i < kColsPerLane; ++i) acc[i] += partial[(w * kColsPerLane + i) * 32 + lane];
      }
      *reinterpret_cast<Vec*>(b.dwr + static_cast<size_t>(e) * b.H + col) = pack(acc);
    }
    __syncthreads();  // partial is rewritten by the next unit
  }
}
