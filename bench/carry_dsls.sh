#!/usr/bin/env bash
# CuTe DSL and TileLang for the H200 (Triton is on its image): their wheels are ~180 MB and a device
# run carries at most 64 MiB with the tree (4 MB) and .snap (7 MB), so they travel in four 46 MiB
# parts over back-to-back runs while the machine stays warm (shared/GPU.md, "Python DSLs on the H200").
#   bash bench/carry_dsls.sh prepare          # here: wheels for Python 3.12 -> .dslparts/part_*, sha256
#   then for each part N, on the device (carry [".snap", ".dslpart"] with .dslpart/ holding part N, and
#   dsls.tar.sha256 beside the first):
#   bash bench/carry_dsls.sh stage            # copies .dslpart/* to /tmp/stage/
#   bash bench/carry_dsls.sh install          # after the last part: joins, checks the sha256, installs
#                                             # into /tmp/site (PYTHONPATH=/tmp/site, as the other wheels)
# CuTe DSL's `cutlass` package lives in nvidia_cutlass_dsl/dsl_packages, which its wheel adds to sys.path
# by a .pth file; pip --target does not make /tmp/site a site directory, so that .pth never runs and the
# folder must be on PYTHONPATH itself (bench/gpu_session.sh adds it when present).
# FlashInfer (issue 50's attention anchor, bench/llama_decode.py attention_anchors) travels the same way with its
# needs, CuTe DSL among them (~250 MB, six parts): `bash bench/carry_dsls.sh prepare flashinfer`; `install` then
# checks `import flashinfer` (its decode kernels are compiled on first use, with the GPU machine's nvcc and ninja).
set -euo pipefail
SET=${2:-dsls}
DSL=("nvidia-cutlass-dsl==4.8.1" "nvidia-cutlass-dsl-libs-base==4.8.1" "nvidia-cutlass-dsl-libs-core==4.8.1"
     "nvidia-cutlass-dsl-libs-cu13==4.8.1")
if [ "$SET" = flashinfer ]; then
  WHEELS=("${DSL[@]}" "flashinfer-python==0.7.4" "apache-tvm-ffi==0.1.15.post2" "cuda-tile" "nccl4py" "nccl-extensions"
          "nvidia-cudnn-frontend" "nvidia-ml-py" "einops" "tabulate" "ninja" "torch-c-dlpack-ext")
else
  WHEELS=("${DSL[@]}" "tilelang==0.1.15" "apache-tvm-ffi==0.1.12" "z3-solver==4.15.4.0" "torch-c-dlpack-ext" "ml-dtypes"
          "cloudpickle")
fi
case "${1:-}" in
  prepare)
    rm -rf .dslwheels .dslparts && mkdir -p .dslwheels .dslparts
    for spec in "${WHEELS[@]}"; do
      python -m pip download --no-deps -q -d .dslwheels --python-version 3.12 --only-binary=:all: \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$spec"
    done
    tar -cf .dslparts/dsls.tar -C .dslwheels .
    (cd .dslparts && sha256sum dsls.tar > dsls.tar.sha256 && split -b 46M -d dsls.tar part_ && rm dsls.tar)
    ls -la .dslparts
    ;;
  stage)
    mkdir -p /tmp/stage && cp .dslpart/* /tmp/stage/ && ls -la /tmp/stage
    ;;
  install)
    cd /tmp/stage && cat part_* > dsls.tar && sha256sum -c dsls.tar.sha256
    mkdir -p wheels && tar -xf dsls.tar -C wheels
    pip install -q --no-index --no-deps --no-compile --target /tmp/site wheels/*.whl
    if [ -n "$(ls wheels | grep -i flashinfer)" ]; then probe="import flashinfer; print('flashinfer', flashinfer.__version__)"
    else probe="import cutlass.cute, tilelang; print('CuTe DSL and TileLang import')"; fi
    PYTHONPATH=/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site python3 -c "$probe"
    ;;
  *)
    echo "usage: bash bench/carry_dsls.sh prepare [dsls|flashinfer] | stage | install" >&2
    exit 2
    ;;
esac
