#!/usr/bin/env bash
# One device call on the H200: environment check, the whole test suite (GPU tests included), the
# demo end to end, and the GPU benchmark. Logs and JSON land in $OUT (fetched back by the tool).
# Run from the repository root:  PIPELINK_GIT_REVISION=$(git rev-parse HEAD) bash bench/gpu_session.sh
# (the device copy has no .git, so the revision is passed in)
set -uo pipefail
OUT=${OUT:-/tmp/pipelink-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 PIPELINK_CACHE_DIR=/tmp/pipelink-cache
status=0
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c "import pipelink.backend.toolchain as t; print('nvcc', t.find_nvcc()); print('cuobjdump', t.find_tool('cuobjdump')); print('nvJitLink', t.nvjitlink_version())"
} 2>&1 | tee "$OUT/env.log"
python3 -m pipelink.cli demo -o /tmp/pipelink-demo 2>&1 | tee "$OUT/demo.log" || status=1
cp /tmp/pipelink-demo/demo.json "$OUT/demo.json" 2>/dev/null
python3 bench/smem_limit_probe.py /tmp/pipelink-demo/pipelink/tile_fold.cubin pl_tile_fold 2>&1 | tee "$OUT/smem_probe.log"
python3 -m pytest -q -rs tests 2>&1 | tee "$OUT/pytest.log" || status=1
python3 bench/demo_gpu.py --out "$OUT" 2>&1 | tee "$OUT/bench.log" || status=1
exit $status
