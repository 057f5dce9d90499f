// moe_bwd_combine: the MoE combine's backward, a whole-block phase before the backward GEMM's tile loops, in every
// thread of every block. Each warp takes one token at a time (grid-strided): for each slot s, row r = token_row[t, s],
//   do[r, :] = bf16(w[t, s] dy[t, :])            (fp32 product, 8 columns = 16 bytes per lane per step)
//   dw_s     = dy[t, :] . o[r, :]                (fp32: each lane's columns in order, then a butterfly over the warp)
//   dchosen[t, s] = w_s (dw_s - sum_s' w_s' dw_s')   (the softmax over the chosen logits, backward)
// Then the padding rows (row_token == -1) of do are zeroed: the GEMMs read whole 128-row tiles of every expert. Rows
// past the last expert's hold whatever the forward left in row_token; one of those that reads -1 is zeroed too,
// which no reader minds. A grid barrier at the end: every do row is stored before any tile reads it.

#include <cuda_bf16.h>

namespace {
constexpr int kMaxTopk = 8;  // the contract's topk range
constexpr int kVec = 8;      // bf16 columns per lane per step: one 16-byte vector

static __device__ void unpack8(const int4& v, float (&f)[kVec]) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) {
    const float2 x = __bfloat1622float2(p[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}
}  // namespace

extern "C" __device__ void moe_bwd_combine_t(pl_ctx ctx, pl_bind_moe_bwd_combine b) {
  __nv_bfloat16* dout = reinterpret_cast<__nv_bfloat16*>(b.dout);
  float* dchosen = reinterpret_cast<float*>(b.dchosen);
  const int lane = ctx.thread % 32, warps = blockDim.x / 32;
  const int gwarp = blockIdx.x * warps + ctx.thread / 32, gwarps = gridDim.x * warps;
  const int vecs = b.H / kVec;

  for (int t = gwarp; t < b.T; t += gwarps) {
    // Lane s reads slot s's row and weight; every lane gets all of them.
    int my_row = 0;
    float my_w = 0.f;
    if (lane < b.topk) {
      my_row = b.token_row[static_cast<size_t>(t) * b.topk + lane];
      my_w = b.weights[static_cast<size_t>(t) * b.topk + lane];
    }
    int row[kMaxTopk];
    float w[kMaxTopk], dot[kMaxTopk];
#pragma unroll
    for (int s = 0; s < kMaxTopk; ++s) {
      row[s] = __shfl_sync(0xffffffffu, my_row, s);
      w[s] = __shfl_sync(0xffffffffu, my_w, s);
      dot[s] = 0.f;
    }
    const __nv_bfloat16* dy = b.dy + static_cast<size_t>(t) * b.H;
    for (int c = lane; c < vecs; c += 32) {
      float g[kVec];
      unpack8(__ldg(reinterpret_cast<const int4*>(dy) + c), g);
#pragma unroll
      for (int s = 0; s < kMaxTopk; ++s) {
        if (s < b.topk) {
          const size_t at = static_cast<size_t>(row[s]) * b.H + static_cast<size_t>(c) * kVec;
          float o[kVec];
          unpack8(__ldg(reinterpret_cast<const int4*>(b.o + at)), o);
          int4 out;
          __nv_bfloat162* packed = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
          for (int i = 0; i < kVec; ++i) dot[s] = fmaf(g[i], o[i], dot[s]);
#pragma unroll
          for (int i = 0; i < kVec / 2; ++i) packed[i] = __floats2bfloat162_rn(w[s] * g[2 * i], w[s] * g[2 * i + 1]);
          *reinterpret_cast<int4*>(dout + at) = out;
        }
      }
    }
    float mixed = 0.f;  // sum_s w_s dw_s, in slot order
#pragma unroll
    for (int s = 0; s < kMaxTopk; ++s) {
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) dot[s] += __shfl_xor_sync(0xffffffffu, dot[s], d);
      if (s < b.topk) mixed = fmaf(w[s], dot[s], mixed);
    }
#pragma unroll
    for (int s = 0; s < kMaxTopk; ++s)
      if (s < b.topk && lane == s) dchosen[static_cast<size_t>(t) * b.topk + s] = w[s] * (dot[s] - mixed);
  }

  // Padding rows: each warp looks at 32 rows at a time and zeroes those that hold no token.
  for (int r0 = gwarp * 32; r0 < b.rows_max; r0 += gwarps * 32) {
    const int r = r0 + lane;
    unsigned pad = __ballot_sync(0xffffffffu, r < b.rows_max && __ldg(b.row_token + r) == -1);
    while (pad != 0) {
      const int j = __ffs(pad) - 1;
      pad &= pad - 1;
      int4* dst = reinterpret_cast<int4*>(dout + static_cast<size_t>(r0 + j) * b.H);
      for (int c = lane; c < vecs; c += 32) dst[c] = make_int4(0, 0, 0, 0);
    }
  }

  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 1);  // every do row is stored
  __syncthreads();
}
