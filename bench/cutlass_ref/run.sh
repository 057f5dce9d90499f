#!/usr/bin/env bash
# Build and run the stock CUTLASS sm90 GEMM reference.
# Usage: run.sh <cutlass_include_dir (contains cute/ and cutlass/)> [out_dir=/tmp] [extra args: iters raster swizzle]
set -euo pipefail
INC="${1:?usage: run.sh CUTLASS_INCLUDE_DIR [OUT_DIR] [iters raster swizzle]}"
OUT="${2:-/tmp}"
shift $(( $# >= 2 ? 2 : 1 ))
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NVCC="${NVCC:-nvcc}"
mkdir -p "$OUT"
BIN="${STOCK_GEMM_BIN:-$OUT/stock_gemm}"  # STOCK_GEMM_BIN: a binary built beforehand (skips the ~1 min build)
if [ -z "${STOCK_GEMM_BIN:-}" ]; then
  echo "compiling $BIN ..." >&2
  "$NVCC" -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr -DNDEBUG \
    -I"$INC" -o "$BIN" "$HERE/stock_gemm.cu"
fi
rc=0
for shape in "1024 51200 5120" "4096 51200 5120" "8192 51200 5120" "4096 5120 25600" "4096 16384 2048"; do
  # shellcheck disable=SC2086
  "$BIN" $shape "$@" || { echo "FAILED: $shape" >&2; rc=1; }
done
exit $rc
