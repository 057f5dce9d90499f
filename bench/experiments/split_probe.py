"""Where a split schedule's time goes (issue 15): one Qwen shape under several configurations (say
tiles against hybrid), timed interleaved, and each linked once more with the trace, whose raw
per-block timeline ([grid, iters, slots, start/end] in ns) is saved for reading on the CPU.

    PYTHONPATH=src python3 bench/experiments/split_probe.py --out DIR --shape qwen_gate_up_1024 \
        --configs 256,4,column_major,0,1 256,4,column_major,0,1,hybrid [--gemm-alone]

Each configuration is checked against the reference (the NaN-poisoned output, bf16 tolerance) before
it is traced or timed; one that fails is recorded and left out. Writes split_probe-*.json (each check,
medians, paired ratios against the first configuration that passed) and one trace_<config>.npz per
configuration (the buffer and the slot labels).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the harness and qwen_mlp
import qwen_mlp  # noqa: E402
from harness import RESULTS, check_run, example, log, paired_ratio, time_interleaved, warm_up, write_result  # noqa: E402
from qwen_mlp import shapes  # noqa: E402

import pipelink  # noqa: E402
from pipelink.abi import TRACE  # noqa: E402
from pipelink.runtime import Runtime  # noqa: E402


def traced_timeline(spec: Path, case, cols: int) -> tuple[np.ndarray, list[str], list[str]]:
    """One launch of the traced build: its trace buffer, and each slot's label and role."""
    import torch
    kernel = pipelink.link(spec, trace=True)
    runtime = Runtime(kernel.cubin, kernel.manifest)
    by_name = {"mainloop.a": case.x, "mainloop.b": case.w}
    arrays, trace = [], None
    for p in runtime.params:
        if p.name in by_name:
            arrays.append(by_name[p.name])
        elif p.ref == TRACE:
            trace = torch.zeros(p.shape, dtype=torch.int64, device="cuda")  # the runtime takes uint64 as int64
            arrays.append(trace)
        else:
            arrays.append(case.output(cols))
    for _ in range(3):  # warm: the last launch's trace is kept
        trace.zero_()
        runtime.launch_arrays(arrays)
    torch.cuda.synchronize()
    slots = kernel.manifest["trace"]["slots"]
    return trace.cpu().numpy(), [s["label"] for s in slots], [s["role"] for s in slots]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen_gate_up_1024")
    ap.add_argument("--configs", nargs="+", default=["256,4,column_major,0,1", "256,4,column_major,0,1,hybrid"])
    ap.add_argument("--gemm-alone", action="store_true", help="the GEMM with the identity epilogue (gated = 0)")
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    m, k, n, gated = qwen_mlp.SHAPES[args.shape]
    shape = (m, k, n, 0 if args.gemm_alone else gated)
    work = Path(tempfile.mkdtemp(prefix="pl-split-probe-"))
    packages = shapes.pack(work)
    case = qwen_mlp.Case(shape, example("qwen_mlp/reference.py"))
    cols = n if args.gemm_alone else case.cols
    reference = case.x.float() @ case.w.float().t() if args.gemm_alone else case.ref
    fns, result = {}, {"shape": args.shape, "gemm_alone": args.gemm_alone, "configs": {}}
    for text in args.configs:
        config = qwen_mlp.parse_config(text)
        spec = shapes.write_spec(work / shapes.candidate_dir(config), packages, shape, config)
        launch, y, _ = qwen_mlp.linked_launch(spec, "pipelink", case, cols)
        # checked against the reference before it is traced or timed; a configuration that fails is not
        result["configs"][text] = {"check": check_run(launch, y, reference)}
        if not result["configs"][text]["check"]["passed"]:
            log(f"{text}: FAILED the reference check: {result['configs'][text]['check']['why']}")
            continue
        fns[text] = launch
        data, labels, roles = traced_timeline(spec, case, cols)
        name = shapes.candidate_dir(config)
        np.savez_compressed(args.out / f"trace_{args.shape}_{name}.npz", trace=data, labels=labels, roles=roles)
        log(f"{text}: traced, {data.shape}")
    warm_up(next(iter(fns.values())), 0.5)
    times = time_interleaved(fns, args.reps)
    first = next(iter(fns))
    for text in fns:
        row = {**result["configs"][text], **times[text]}  # the summary and every launch's time (times_ms, kept beside the JSON)
        if text != first:
            row["over_first_paired"] = paired_ratio(times[text], times[first])
        result["configs"][text] = row
        log(f"{text}: median {row['median_ms']:.4f} ms" + (f", over the first {row['over_first_paired']:.4f} (paired)"
                                                         if text != first else ""))
    write_result("split_probe", result, args.out)


if __name__ == "__main__":
    main()
