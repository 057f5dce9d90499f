// Host program: prints CuTe's own partition of the TILE_M x TILE_N wgmma C tile over 256 threads (two
// warpgroups stacked along M where TILE_M is 128, side by side along N where it is 64, as gemm_mainloop.cu
// lays them out), one line per thread: "t row col row col ..." in value order.
// tests/examples/test_qwen.py compares it with the fragment expressions in gemm_mainloop's contract.
#include <cstdio>
#include <cstdlib>
#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/arch/mma_sm90_gmma_ext.hpp>  // 64 x 144 and 64 x 208, as gemm_mainloop.cu includes them
#include <cute/atom/mma_traits_sm90_gmma_ext.hpp>
using namespace cute;

template <int N> struct Atom;
template <> struct Atom<64> { using type = SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<128> { using type = SM90::GMMA::MMA_64x128x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<256> { using type = SM90::GMMA::MMA_64x256x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<144> { using type = SM90::GMMA::MMA_64x144x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<208> { using type = SM90::GMMA::MMA_64x208x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<200> { using type = SM90::GMMA::MMA_64x200x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };

template <int TILE_M, int TILE_N, class Mma> int print_slices(Mma const& mma) {
  auto coords = make_identity_tensor(Shape<Int<TILE_M>, Int<TILE_N>>{});
  for (int t = 0; t < 256; ++t) {
    auto part = mma.get_thread_slice(t).partition_C(coords);
    printf("%d", t);
    for (int v = 0; v < size(part); ++v) printf(" %d %d", int(get<0>(part(v))), int(get<1>(part(v))));
    printf("\n");
  }
  return 0;
}

// Every shape in one program (one nvcc run: CuTe's headers take minutes to compile): SHAPES is a list of
// X(TILE_M, TILE_N); the program prints the shape its two arguments name.
template <int TILE_M, int TILE_N> int print_partition() {
  if constexpr (TILE_M == 128) {
    auto mma = make_tiled_mma(typename Atom<TILE_N>::type{}, Layout<Shape<_2, _1, _1>>{});
    return print_slices<TILE_M, TILE_N>(mma);
  } else {
    auto mma = make_tiled_mma(typename Atom<TILE_N / 2>::type{}, Layout<Shape<_1, _2, _1>>{});
    return print_slices<TILE_M, TILE_N>(mma);
  }
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const int tile_m = atoi(argv[1]), tile_n = atoi(argv[2]);
#define X(M, N) if (tile_m == M && tile_n == N) return print_partition<M, N>();
  SHAPES
#undef X
  return 3;  // a shape the program was not built for
}
