// llama_splits.cuh: the end of split-KV decode attention, shared by attn_long and attn_long_wt.
//
// Each warp leaves its online-softmax record of the item in shared memory, `partial`
// [8 warps][4 heads][kPartRow] fp32 (64 dims of unnormalized output, then its max m and sum l, in
// log2 units). merge_warps() rescales the eight to their common max: with one split per (sequence,
// KV head) that is the answer, stored as bf16; else the split's record (output, max, sum) goes to
// the `splits` workspace, and after the grid barrier combine() does the same across the splits
// for every output element. A warp without a valid key has m = -inf and weight 0; some warp of an
// item always has one, so the common max is finite.
// No include guard: the monolithic control compiles each component's source in a namespace of its
// own, and each copy of this header must be seen there (a guard would hide one).

#include <cuda_bf16.h>

namespace llama_splits {
constexpr int kGroup = 4;                   // query heads per KV head
constexpr int kWarps = 8;                   // records per item
constexpr int kPartRow = 68;                // a warp's head in `partial`: 64 dims, m, l, 2 pad (16-byte rows)
constexpr int kSplitFloats = kGroup * 66;   // a split's record in the workspace: per head 64 dims, m, l
constexpr int kMaxSplits = 16;              // the `splits` workspace's room per (sequence, KV head): 132 blocks / 8

// How the context's `tiles` split for `pairs` (sequence, KV head) pairs: the most splits that keep
// the items (pair, split) <= blocks (one round), then `per` tiles each, none of them empty.
struct Splits {
  int per, splits, items;
};
__device__ __forceinline__ Splits split_context(int tiles, int pairs) {
  const int most = max(1, min(min(static_cast<int>(gridDim.x) / pairs, kMaxSplits), tiles));
  const int per = (tiles + most - 1) / most, splits = (tiles + per - 1) / per;
  return {per, splits, pairs * splits};
}

__device__ __forceinline__ float fast_exp2(float x) {  // 2^-inf = +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The item's output (one split) or its split record, from the warps' records; every thread of the
// block calls it after the barrier that completes `partial`.
__device__ __forceinline__ void merge_warps(int thread, const float* partial, int splits, int item, int seq, int kv,
                                            float* split_out, __nv_bfloat16* o_all) {
  for (int i = thread; i < kGroup * 64; i += blockDim.x) {
    const int h = i / 64, d = i % 64;
    float big = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) big = fmaxf(big, partial[(w * kGroup + h) * kPartRow + 64]);
    float num = 0.f, den = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float* row = partial + (w * kGroup + h) * kPartRow;
      const float wt = fast_exp2(row[64] - big);
      num = fmaf(wt, row[d], num);
      den = fmaf(wt, row[65], den);
    }
    if (splits == 1) {  // the whole context: the answer
      o_all[(static_cast<size_t>(seq) * 32 + kv * kGroup + h) * 64 + d] = __float2bfloat16(__fdividef(num, den));
    } else {
      float* out = split_out + static_cast<size_t>(item) * kSplitFloats + h * 66;
      out[d] = num;
      if (d == 0) {
        out[64] = big;
        out[65] = den;
      }
    }
  }
}

// After the grid barrier: every output element of the batch from its splits' records.
__device__ __forceinline__ void combine(int thread, const float* split_out, __nv_bfloat16* o_all, int batch,
                                        int splits) {
  for (int i = blockIdx.x * blockDim.x + thread; i < batch * 32 * 64; i += gridDim.x * blockDim.x) {
    const int d = i % 64, head = (i / 64) % 32, seq = i / (32 * 64);
    const int pair = seq * 8 + head / kGroup, h = head % kGroup;
    const float* recs = split_out + static_cast<size_t>(pair) * splits * kSplitFloats + h * 66;
    float big = -INFINITY;
    for (int s = 0; s < splits; ++s) big = fmaxf(big, recs[s * kSplitFloats + 64]);
    float num = 0.f, den = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float* rec = recs + s * kSplitFloats;
      const float w = fast_exp2(rec[64] - big);
      num = fmaf(w, rec[d], num);
      den = fmaf(w, rec[65], den);
    }
    o_all[i] = __float2bfloat16(__fdividef(num, den));
  }
}
}  // namespace llama_splits
