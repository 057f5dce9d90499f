#!/usr/bin/env bash
# GPU work on the H200, in parts so each device call stays well under its 10-minute limit:
#   bash bench/gpu_session.sh tests    # environment check + the whole test suite (GPU tests included)
#   bash bench/gpu_session.sh demo_bw  # pipelink demo (prints its share of the read bandwidth), the demo's GPU tests,
#                                      # bench/demo_bw.py (demo kernel vs read bandwidth and torch.sum; no CUTLASS needed)
#   bash bench/gpu_session.sh qwen     # bench/qwen_mlp.py, gate/up at M = 128, 1024 and 4096 (~7 minutes)
#   bash bench/gpu_session.sh qwen_rest RESULT [SHAPES]  # the shapes RESULT lacks (of SHAPES, comma-separated,
#                                      # if given) and stock CUTLASS, added to RESULT
#   bash bench/gpu_session.sh transformers  # the transformers integration's GPU tests (issue 50), decode at launch,
#                                      # the Llama MLP kernels (examples/llama_mlp), the MoE layer on W1 halves
#   bash bench/gpu_session.sh transformers_e2e [ARGS]  # bench/transformers_e2e.py: --configs 1:16 ... (Llama decode),
#                                      # --configs --moe-tokens 4096 16384 (the Qwen3-MoE prefill alone)
#   bash bench/gpu_session.sh tf_probe  # bench/experiments/tf_decode_probe.py: why the routed Llama decodes slowly
#   bash bench/gpu_session.sh gpu_tests [FILES]  # only the GPU tests (marker gpu), of FILES or of tests/
#   bash bench/gpu_session.sh gpu_suite [FILES]  # the same under pytest-xdist, one warm child a worker: the whole
#                                      # GPU suite in ~2 minutes on an H100 (bench/results/gpu_suite-h100-20261206b.json)
#   bash bench/gpu_session.sh any_shape [ARGS]  # bench/any_shape.py: the Qwen operator over M = 1 .. 8192 (issue 49)
#   bash bench/gpu_session.sh suite_then_any_shape [ARGS]  # gpu_suite (SUITE_LIMIT s), then any_shape in the rest
#   bash bench/gpu_session.sh launch_overhead  # bench/launch_overhead.py: cuda.core vs cuda.bindings (load, launch)
#   bash bench/gpu_session.sh perturb  # bench/perturb.py --link moe (the MoE layer's closed permute perturbed, symbol vs pipelink)
#   bash bench/gpu_session.sh perturb_qwen  # bench/perturb.py --link qwen (the Qwen link's closed epilogue)
#   bash bench/gpu_session.sh perturb_train [ARGS]  # bench/perturb.py --link moe_train (the training backward's closed
#                                      # plan; carry .whl)
#   bash bench/gpu_session.sh moe_train_trace  # verify --trace of the training backward (each component's time)
#   bash bench/gpu_session.sh moe_train [ARGS]  # bench/moe_train.py: the training step at each shape (--shapes,
#                                      # --no-training), its kernels alone, and the 200-step training run (carry .whl)
#   bash bench/gpu_session.sh perturb_wide [moe4096] [moe1024] [qwen]  # the widened study (issue 48): every MoE case
#                                      # at 4096 tokens (~5-7 minutes), the count producer's at 1024 (~1.5), every Qwen
#                                      # case (~4); default all three (~11, past a call's limit when several symbol
#                                      # kernels hang: run `perturb_wide moe4096`, then `perturb_wide moe1024 qwen`)
#   bash bench/gpu_session.sh moe      # bench/moe.py (the MoE layer: every shape against torch grouped_mm)
#   bash bench/gpu_session.sh llama    # bench/llama_decode.py (the decode block, both attentions, against torch)
#                                      # at B = 1 and 8 (~6 minutes; the 18 rows take ~10, past a call's limit)
#   bash bench/gpu_session.sh llama64 RESULT  # B = 64, added to RESULT (llama's JSON, copied into the tree)
#   bash bench/gpu_session.sh llama_sweep  # its crossover sweep, in a call of its own
#   bash bench/gpu_session.sh llama_probe  # bench/experiments/llama_phases.py (each phase's time, graph replay too)
#                                      # verify --trace of the block (per-phase timeline), and ncu on the qkv
#                                      # phase alone at B = 1 and 64 (text reports in $OUT)
#   bash bench/gpu_session.sh llama_spread  # llama_phases, the projections' layout (~2 minutes): the example's
#                                      # choices (shapes.chosen_facts: 32-row parts, 16 for o-proj, rings of 8 and 16
#                                      # stages, the activation staged at B <= 8) against the same without staging
#                                      # and against the parts as at 0abf45a, at B = 1, 8, 64 (L = 16) and L = 4096
#   bash bench/gpu_session.sh llama_wgmma  # llama_phases: the wgmma core (gemv_core = 1), alone and in clusters of
#                                      # two (cluster_ctas = 2), against the example's choices at 8:16, 64:16, 64:4096
#   bash bench/gpu_session.sh llama_trace  # verify --trace of the example's block at 1:16, 8:16, 64:16, 64:4096: how
#                                      # long the slowest block of each phase trails the others
#   bash bench/gpu_session.sh decode_floor  # the decode block's skeleton alone: its launch, 1-3 grid barriers, its
#                                      # 21 MB weight read, and that read cut by two barriers (the L = 16 floor)
#   bash bench/gpu_session.sh sm_stream  # TMA streaming alone: one SM's rate against its bytes in flight (its round
#                                      # trip), k SMs' share of HBM, the decode projections' weights with their rings
#   bash bench/gpu_session.sh llama_ncu  # ncu at B = 64, L = 16: the qkv phase alone and the whole block
#   bash bench/gpu_session.sh placement  # bench/experiments/workspace_placement.py: one linked cubin loaded
#                                      # several times, on workspaces of its own or on the first's (~3 minutes)
#   bash bench/gpu_session.sh loop     # bench/loop_table.py: the examples/loop kernel files through verify
#   bash bench/gpu_session.sh paper_table [ARGS]  # bench/paper_table.py: verifies and times the configurations
#                                      # for about 8 minutes, then stops; run it again to continue the same JSON
# Experiments (bench/experiments/) are run by hand, one command each.
# The Qwen components need the CUTLASS headers: carry the nvidia-cutlass wheel and install it with
#   pip install --no-index --no-deps --target /tmp/site nvidia_cutlass-*.whl; PYTHONPATH=/tmp/site
# (carry jsonschema the same way, or the --json GPU test skips: `pip download -d .whl --only-binary=:all:
#  --python-version 3.12 --platform manylinux2014_x86_64 jsonschema` fetches it and its dependencies)
# JSON (with its .times.json.gz) and logs land in $OUT (fetched back by the device tool); each log is
# also kept as <log>.gz, its last 256 KB: copy the JSON, its .times.json.gz and the .log.gz worth keeping
# into bench/results/ (plain logs and profiler reports are git-ignored), then run
# `python bench/readme_results.py` to regenerate the README's results. Run from the repository root with
#   PIPELINK_GIT_REVISION=$(git rev-parse HEAD)   (the device copy of the tree has no .git).
set -uo pipefail
OUT=${OUT:-/tmp/pipelink-out}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1 PIPELINK_CACHE_DIR=/tmp/pipelink-cache
# CuTe DSL installed by bench/carry_dsls.sh: its package folder (normally added by a .pth file, which
# a --target install never runs)
if [ -d /tmp/site/nvidia_cutlass_dsl/dsl_packages ]; then
  export PYTHONPATH=/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
fi
# the device's copy of the tree is not pip-installed: a `pipelink` command on PATH for the pages' commands
# (tests/repo/test_doc_commands.py runs them as a reader would)
if ! command -v pipelink >/dev/null; then
  mkdir -p /tmp/pipelink-bin && printf '#!/bin/sh\nexec python3 -m pipelink "$@"\n' > /tmp/pipelink-bin/pipelink
  chmod +x /tmp/pipelink-bin/pipelink && export PATH=/tmp/pipelink-bin:$PATH
fi
use_cutlass() {  # the CUTLASS headers (carried as the nvidia-cutlass wheel in .whl) on PYTHONPATH
  pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
}
use_transformers() {  # the carried transformers (.whl) where it imports beside the image's packages, else the image's
  # (5.25 needs huggingface_hub >= 2.4, the image has 1.33: on 2026-12-07 the image's 5.17 ran); and the CUTLASS
  # headers the MLP and MoE kernels' mainloops include
  pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl
  export PYTHONPATH=/tmp/site:$PYTHONPATH
  python3 -c "import transformers, huggingface_hub as h; print('image: transformers', transformers.__version__, \
'huggingface_hub', h.__version__)" 2>&1 | tee "$OUT/transformers_env.log"
  pip install -q --no-index --no-deps --target /tmp/site_tf .whl/transformers-*.whl
  if PYTHONPATH=/tmp/site_tf:$PYTHONPATH python3 -c "from transformers import LlamaForCausalLM" 2>>"$OUT/transformers_env.log"; then
    export PYTHONPATH=/tmp/site_tf:$PYTHONPATH
  fi
  python3 -c "import transformers; print('using transformers', transformers.__version__)" | tee -a "$OUT/transformers_env.log"
}
status=0
case "${1:-tests}" in
  tests)
    {
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
      python3 -c "import pipelink.backend.toolchain as t; print('nvcc', t.find_nvcc()); print('cuobjdump', t.find_tool('cuobjdump')); print('nvJitLink', t.nvjitlink_version())"
    } 2>&1 | tee "$OUT/env.log"
    python3 -m pytest -q -rs tests 2>&1 | tee "$OUT/pytest.log" || status=1
    ;;
  demo_bw)
    python3 -m pipelink.cli demo -o /tmp/pipelink-demo 2>&1 | tee "$OUT/demo.log" || status=1
    python3 -m pytest -q -rs tests/examples/test_demo_bw.py tests/examples/test_gpu.py::test_verify_demo_linked_and_monolithic 2>&1 \
      | tee "$OUT/pytest_demo_bw.log" || status=1
    python3 bench/demo_bw.py --out "$OUT" 2>&1 | tee "$OUT/demo_bw.log" || status=1
    ;;
  qwen)  # gate/up at M = 128, 1024 and 4096, the fused kernel's table and the GEMM alone's (~7 minutes: 128 and
        # 1024 took 3.6 on 12-05; the whole table takes ~14, past a call's limit: then qwen_rest RESULT)
    python3 bench/qwen_mlp.py --out "$OUT" --shapes qwen_gate_up_128,qwen_gate_up_1024,qwen_gate_up_4096 2>&1 \
      | tee "$OUT/qwen.log" || status=1
    ;;
  qwen_rest)  # the shapes the JSON named by $2 (qwen's, copied into the tree) lacks, and stock CUTLASS
    # with SHAPES only those; without, every shape left and then stock CUTLASS
    if [ -n "${3:-}" ]; then which=(--shapes "$3"); else which=(--stock-cutlass); fi
    python3 bench/qwen_mlp.py --out "$OUT" --resume "$2" "${which[@]}" 2>&1 | tee "$OUT/qwen_rest.log" || status=1
    ;;
  transformers)  # issue 50: the integration's GPU tests and the decode block's position at launch, under the
                 # carried transformers (.whl, 5.25: the one the CPU tests ran with) where it imports beside the
                 # image's packages, else the image's own
    use_transformers
    # TF_TESTS narrows the selection (a -k expression) where one call cannot hold them all
    timeout "${TF_LIMIT:-540}" python3 -m pytest -q -rA -m gpu -p no:cacheprovider tests/examples/test_llama_mlp.py \
      tests/examples/test_moe.py tests/integrations tests/examples/test_llama_decode.py \
      -k "${TF_TESTS:-greedy or position or llama_mlp or moe_blocks or halves}" \
      2>&1 | tee "$OUT/pytest_transformers.log" || status=1
    ;;
  transformers_e2e)  # [ARGS...] bench/transformers_e2e.py (issue 50) under the same transformers
    use_transformers
    export PYTHONPATH=$PWD/bench:$PYTHONPATH
    timeout "${TF_LIMIT:-540}" python3 bench/transformers_e2e.py --out "$OUT" "${@:2}" 2>&1 \
      | tee "$OUT/transformers_e2e.log" || status=1
    ;;
  tf_probe)  # [ARGS...] bench/experiments/tf_decode_probe.py (issue 50): hidden states against fp32, cProfile of the
             # routed eager decode, dynamo's recompiles and graph breaks in the routed compiled one (~3 minutes)
    use_transformers
    export PYTHONPATH=$PWD/bench:$PYTHONPATH
    timeout "${TF_LIMIT:-300}" python3 bench/experiments/tf_decode_probe.py --out "$OUT" "${@:2}" 2>&1 \
      | tee "$OUT/tf_decode_probe.log" || status=1
    ;;
  gpu_tests)  # bash bench/gpu_session.sh gpu_tests [test files...] (default: all of tests/); the MoE, grid,
              # Llama, kernel-file and test_gpu files together take ~9 minutes: give them a call of their own
    shift
    python3 -m pytest -q -rA -m gpu -p no:cacheprovider "${@:-tests}" 2>&1 | tee "$OUT/pytest_gpu.log" || status=1
    ;;
  gpu_suite)  # [FILES...] the whole GPU suite (or the GPU tests of FILES) at once under pytest-xdist (carried as
              # a wheel in .whl): GPU_SUITE_WORKERS workers (default 3 a 4 cores: 16 ran out of device memory on an
              # H100), GPU_SUITE_DIST scheduling (default worksteal: the long files no longer hold one worker each),
              # each test's time appended to $OUT/gpu_times.jsonl as it ends (bench/pytest_times.py); each worker's
              # verifies share one warm GPU child (tests/conftest.py)
    # (jsonschema and its dependencies too, for the --json GPU test: see the note at the top)
    pip install -q --no-index --no-deps --target /tmp/site .whl/pytest_xdist-*.whl .whl/execnet-*.whl \
      .whl/nvidia_cutlass-*.whl $(ls .whl/{jsonschema,jsonschema_specifications,referencing,rpds_py,attrs}-*.whl 2>/dev/null)
    export PYTHONPATH=/tmp/site:$PWD/bench:$PYTHONPATH PYTEST_TIMES=$OUT/gpu_times.jsonl
    [ $# -gt 1 ] || set -- "$1" tests
    start=$SECONDS
    timeout "${GPU_SUITE_LIMIT:-520}" python3 -m pytest -q -rfEs -m gpu -p no:cacheprovider -p pytest_times \
      -n "${GPU_SUITE_WORKERS:-$(( $(nproc) * 3 / 4 ))}" --dist "${GPU_SUITE_DIST:-worksteal}" "${@:2}" 2>&1 \
      | tee "$OUT/pytest_gpu_suite.log" || status=1
    echo "gpu_suite: $(( SECONDS - start )) s" | tee -a "$OUT/pytest_gpu_suite.log"
    ;;
  perturb)
    python3 bench/perturb.py --link moe --out "$OUT" 2>&1 | tee "$OUT/perturb.log" || status=1
    ;;
  suite_then_any_shape)  # [ARGS...] the whole GPU suite (gpu_suite, SUITE_LIMIT s, default 200), then
                         # bench/any_shape.py ARGS in what is left of ANY_SHAPE_LIMIT: one device call for both
    GPU_SUITE_LIMIT=${SUITE_LIMIT:-200} bash "$0" gpu_suite tests || status=1
    ANY_SHAPE_LIMIT=$(( ${ANY_SHAPE_LIMIT:-540} - SECONDS )) bash "$0" any_shape "${@:2}" || status=1
    ;;
  any_shape)  # [ARGS...] bench/any_shape.py (issue 49: the Qwen gate/up operator over M = 1 .. 8192, untuned)
    pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl
    export PYTHONPATH=/tmp/site:$PWD/bench:$PYTHONPATH
    timeout "${ANY_SHAPE_LIMIT:-540}" python3 bench/any_shape.py --out "$OUT" "${@:2}" 2>&1 | tee "$OUT/any_shape.log" \
      || status=1
    ;;
  launch_overhead)  # bench/launch_overhead.py: cuda.core against cuda.bindings, module load and launch (issue 52)
    python3 bench/launch_overhead.py --out "$OUT" 2>&1 | tee "$OUT/launch_overhead.log" || status=1
    ;;
  perturb_qwen)
    python3 bench/perturb.py --link qwen --out "$OUT" 2>&1 | tee "$OUT/perturb_qwen.log" || status=1
    ;;
  moe_train_trace)  # verify --trace of the training backward at Qwen3-30B-A3B 4096 and 16384 tokens (issue 51): each
                    # component's time per block and role (does the store epilogue hold the tile loop?); carry .whl
    use_cutlass
    timeout "${TRACE_LIMIT:-480}" python3 -c "
import sys, tempfile, json; from pathlib import Path; sys.path.insert(0, 'bench')
from harness import example
import pipelink
shapes = example('moe_train/shapes.py')
work = Path(tempfile.mkdtemp()); packages = shapes.pack_backward(work)
for tokens in (4096, 16384):
    out = Path('/tmp/pipelink-trace') / f'moe_train_bwd_{tokens}'
    r = pipelink.verify(shapes.write_specs(work / out.name, packages, 'qwen3_30b_a3b', tokens)[1], out_dir=out,
                        seeds=1, trace=True)
    t = r.rung('trace'); print(out.name, t.status, t.detail, json.dumps(t.figures.get('roles')))
    for c in t.figures.get('components', []):
        print(json.dumps({k: c.get(k) for k in ('label', 'blocks', 'mean_ms_per_block', 'max_ms_per_block', 'end_us')}))
" 2>&1 | tee "$OUT/moe_train_trace.log" || status=1
    ;;
  perturb_train)  # [ARGS] issue 51: the backward link's closed plan perturbed (bench/perturb.py --link moe_train);
                  # its mainloop includes the CUTLASS headers: carry .whl
    use_cutlass
    timeout "${PERTURB_LIMIT:-540}" python3 bench/perturb.py --link moe_train --out "$OUT" "${@:2}" 2>&1 \
      | tee "$OUT/perturb_train.log" || status=1
    ;;
  perturb_wide)  # each part one perturb-gpu-<stamp>.json in $OUT; the unchanged packages are packed once per
                 # warm machine (--base), a hung symbol kernel costs its --timeout + 20 s
    shift
    parts=("$@")
    [ ${#parts[@]} -eq 0 ] && parts=(moe4096 moe1024 qwen)
    for part in "${parts[@]}"; do
      case "$part" in
        moe4096) args=(--link moe --tokens 4096 --timeout 15 --base /tmp/pipelink-perturb-moe) ;;
        moe1024) args=(--link moe --tokens 1024 --timeout 15 --base /tmp/pipelink-perturb-moe --cases unperturbed
                       permute_whole_tile_padding permute_tile_m_64 permute_row_base_16384) ;;
        qwen) args=(--link qwen --timeout 30 --base /tmp/pipelink-perturb-qwen) ;;
        *) echo "perturb_wide: unknown part '$part' (moe4096, moe1024, qwen)" >&2; status=2; continue ;;
      esac
      python3 bench/perturb.py "${args[@]}" --out "$OUT" 2>&1 | tee "$OUT/perturb_$part.log" || status=1
    done
    ;;
  moe)
    python3 bench/moe.py --out "$OUT" 2>&1 | tee "$OUT/moe.log" || status=1
    ;;
  llama)  # the table's B = 1 and 8 rows; llama64 adds B = 64; the crossover sweep is llama_sweep
    python3 bench/llama_decode.py --out "$OUT" --batches 1 8 --sweep 2>&1 | tee "$OUT/llama.log" || status=1
    ;;
  llama64)  # the same table's B = 64 rows (~4 minutes), added to the JSON named by $2 and written to $OUT
    python3 bench/llama_decode.py --out "$OUT" --resume "$2" --batches 64 --sweep 2>&1 \
      | tee "$OUT/llama64.log" || status=1
    ;;
  llama_sweep)  # the crossover sweep alone (both attentions at contexts 16 .. 4096, each batch)
    python3 bench/llama_decode.py --out "$OUT" --contexts 2>&1 | tee "$OUT/llama_sweep.log" || status=1
    ;;
  llama_probe)
    python3 bench/experiments/llama_phases.py --out "$OUT" 2>&1 | tee "$OUT/llama_phases.log" || status=1
    bash "$0" llama_trace || status=1  # the per-phase trace, as that mode prints it
    for config in 1:16:short 64:16:short; do  # the qkv phase alone: where its warps stall, per SASS instruction
      name="qkv_${config//:/_}"
      ncu --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
        --section SourceCounters -k regex:pl_llama -c 1 -o "/tmp/$name" \
        python3 bench/experiments/llama_phases.py --launch-only qkv --configs "$config" > "$OUT/ncu_$name.log" 2>&1 || status=1
      ncu --import "/tmp/$name.ncu-rep" >> "$OUT/ncu_$name.log" 2>&1
      ncu --import "/tmp/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${name}_sass.csv" 2>&1
    done
    ;;
  llama_spread)
    # `before`: the parts as measured at 0abf45a (the ring in 4 stages, no staged activation); `gemv_act_smem=0`:
    # everything but the staging
    before="gemv_rows=32,oproj.gemv_rows=16,gemv_act_smem=0"
    python3 bench/experiments/llama_phases.py --out "$OUT" --configs 1:16:short 1:16:short:gemv_act_smem=0 \
      "1:16:short:$before" 8:16:short 8:16:short:gemv_act_smem=0 "8:16:short:$before" 64:16:short \
      "64:16:short:$before" 1:4096:long_wt "1:4096:long_wt:$before" 64:4096:long_wt "64:4096:long_wt:$before" 2>&1 \
      | tee "$OUT/llama_spread.log" || status=1
    ;;
  llama_wgmma)  # llama_phases: both projections on the wgmma core (gemv_core = 1, its 4 stages) against the example's
                # choices, alone and in clusters of two sharing each activation chunk (cluster_ctas = 2); run it once
                # the wgmma GPU tests pass (a hang here would hold the call to its timeout)
    wgmma="gemv_core=1,gemv_stages=4,oproj.gemv_stages=4,gemv_act_smem=0,gemv_rows=32,oproj.gemv_rows=16"
    python3 bench/experiments/llama_phases.py --out "$OUT" --configs 8:16:short "8:16:short:$wgmma" \
      "8:16:short:$wgmma,cluster_ctas=2" 64:16:short "64:16:short:$wgmma" "64:16:short:$wgmma,cluster_ctas=2" \
      "64:16:short:$wgmma,cluster_ctas=2,oproj.gemv_rows=32" 64:4096:long_wt "64:4096:long_wt:$wgmma" \
      "64:4096:long_wt:$wgmma,cluster_ctas=2" 2>&1 \
      | tee "$OUT/llama_wgmma.log" || status=1
    ;;
  llama_trace)  # verify --trace of the example's block (~2 minutes): each role's critical block and, per phase, the
                # blocks that ran it, their mean and longest time in it, and when the fastest, the median and the
                # slowest block left it (end_us); when each block left it and how long it was inside (block_end_us,
                # block_us): are the blocks that end last the busiest?
    python3 -c "
import sys, tempfile, json; from pathlib import Path; sys.path.insert(0, 'examples/llama_decode')
import shapes, pipelink
work = Path(tempfile.mkdtemp()); packages = shapes.pack(work)
for b, l, a in ((1, 16, 'short'), (8, 16, 'short'), (64, 16, 'short'), (64, 4096, 'long_wt')):
    out = Path('/tmp/pipelink-trace') / f'trace_b{b}_l{l}_{a}'
    r = pipelink.verify(shapes.write_spec(work / out.name, packages, b, l, a), out_dir=out, seeds=1, trace=True)
    t = r.rung('trace'); print(out.name, t.status, t.detail, json.dumps(t.figures.get('roles')))
    for c in t.figures.get('components', []):
        print(json.dumps({k: c[k] for k in ('label', 'blocks', 'mean_ms_per_block', 'max_ms_per_block', 'end_us',
                                            'block_end_us', 'block_us')}))
" 2>&1 | tee "$OUT/llama_trace.log" || status=1
    ;;
  sm_stream)  # bench/experiments/sm_stream.py (~1 minute): one SM's and k SMs' TMA streaming rate against what they
              # keep in flight; the last waves of the Qwen weight; the decode projections' weights alone
    python3 bench/experiments/sm_stream.py --out "$OUT" 2>&1 | tee "$OUT/sm_stream.log" || status=1
    ;;
  decode_floor)  # bench/experiments/decode_floor.py: the decode block's skeleton (launch, grid barriers, the 21 MB
                 # weight read) timed as the table times the block (~1 minute)
    python3 bench/experiments/decode_floor.py --out "$OUT" 2>&1 | tee "$OUT/decode_floor.log" || status=1
    ;;
  llama_ncu)  # where B = 64's projection time goes (bench/NOTES.md, fourth session): ncu on the qkv phase
              # alone and on the whole block at B = 64, L = 16 (the example's spread: whole groups), with the
              # L1/L2 traffic per SM; four files come back (each a text report and its per-SASS-line CSV)
    for prefix in qkv qkv+attn+oproj; do
      name="b64_l16_${prefix//+/_}"
      ncu --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section MemoryWorkloadAnalysis_Tables --section SourceCounters -k regex:pl_llama -c 1 -o "/tmp/$name" \
        python3 bench/experiments/llama_phases.py --launch-only "$prefix" --configs 64:16:short > "$OUT/ncu_$name.log" 2>&1 \
        || status=1
      ncu --import "/tmp/$name.ncu-rep" >> "$OUT/ncu_$name.log" 2>&1
      ncu --import "/tmp/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${name}_sass.csv" 2>&1
    done
    ;;
  placement)
    python3 bench/experiments/workspace_placement.py --out "$OUT" 2>&1 | tee "$OUT/placement.log" || status=1
    ;;
  loop)
    python3 bench/loop_table.py --out "$OUT" 2>&1 | tee "$OUT/loop.log" || status=1
    ;;
  moe_train)  # issue 51: the training step against torch._grouped_mm under torch.compile, and the training run
    # (bench/moe_train.py [ARGS]; carry .whl: the CUTLASS headers)
    use_cutlass
    python3 bench/moe_train.py --out "$OUT" "${@:2}" 2>&1 | tee "$OUT/moe_train.log" || status=1
    ;;
  paper_table)
    # continues the newest table of this revision, or keeps an earlier revision's rows whose links are the same
    # bytes: copy the tables from bench/results into $OUT first (each comes back with the new one). Its
    # .times.json.gz is git-ignored: name it in the device call's carry, or the continuation stops on it missing
    # (paper_table.py continues only a table of the same card: an H100's never an H200's). [ARGS] go to it: on an
    # H100, `--only demo,block_reduce,collide,bias_gelu,qwen,moe,perturb` gives 53 configurations without the
    # Llama family's 27 (the issue asks for at least 51)
    cp bench/results/paper_table-gpu-*.json bench/results/paper_table-gpu-*.times.json.gz "$OUT"/ 2>/dev/null
    # the Qwen and MoE families' mainloops include the CUTLASS headers (the image has no nvidia-cutlass): carry .whl
    if ls .whl/nvidia_cutlass-*.whl >/dev/null 2>&1; then
      use_cutlass
    fi
    python3 bench/paper_table.py --out "$OUT" "${@:2}" 2>&1 | tee "$OUT/paper_table.log" || status=1
    ;;
  *)
    echo "usage: bash bench/gpu_session.sh tests|gpu_tests|demo_bw|qwen|qwen_rest|perturb|perturb_qwen|perturb_train|perturb_wide|moe|llama|llama_sweep|llama_probe|llama_spread|llama_wgmma|llama_trace|decode_floor|sm_stream|llama_ncu|placement|loop|paper_table|moe_train|moe_train_trace" >&2
    exit 2
    ;;
esac
for log in "$OUT"/*.log; do
  [ -e "$log" ] && tail -c 262144 "$log" | gzip -9n > "$log.gz"
done
exit $status
