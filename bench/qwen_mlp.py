"""Issue 4 (and issue 49 item 4): the fused Qwen3-32B gate/up + SwiGLU kernel against cuBLAS, in one process,
served by the operator pipelink.op after `pipelink tune`.

For each shape: the example's spec at the shape's K, N and epilogue (examples/qwen_mlp/shapes.write_spec) is tuned
at its M with the spec's own [tune] searches (the search whose shapes are nearest M: every configuration linked,
verified against the fp32 reference in verify's watched child, the verified ones timed interleaved; the winner
recorded in the tune cache); pipelink.op(spec, vary=("M",)) then serves the shape with the winner. Then,
interleaved round by round on the same inputs: the operator (an eager call: dispatch, output allocation and
launch), the monolithic control of the winning configuration (every source in one nvcc unit), cuBLAS
(torch.matmul) + torch.compile'd SiLU*mul, cuBLAS alone, and for gate/up shapes the GEMM alone (the identity
epilogue, tuned the same way). The bf16 matmul peak is measured in the same run (cuBLAS, 8192^3). JSON + plot
under --out.

    PYTHONPATH=src python3 bench/qwen_mlp.py [--out DIR] [--shapes qwen_gate_up_4096,...] [--reps 40] [--profile SHAPE,...] [--stock-cutlass]
        [--resume RESULT]  # add the shapes RESULT has not timed (a run cut by a device call's limit)
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pipelink
from pipelink.runtime import Runtime
from pipelink.verify import timing

from harness import (RESULTS, ROOT, TIMING, GpuSampler, check, example, log, paired_ratio, quiet_console, resumed,
                     time_interleaved, write_result)

shapes = example("qwen_mlp/shapes.py")  # the shapes and the spec writer
SHAPES = shapes.SHAPES
BASE = (256, 4, "column_major", 0, 1)  # the spec's own configuration: what the tuner's searches replace


class Case:
    """One shape's inputs, reference and timed callables."""

    def __init__(self, shape: tuple, reference_module):
        import torch
        m, k, n, gated = shape
        self.shape, self.gated = shape, gated
        self.cols = n // 2 if gated else n  # output columns: gate and up halves make one
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.x = torch.randn(m, k, generator=gen, device="cuda").to(torch.bfloat16)
        self.w = (torch.randn(n, k, generator=gen, device="cuda") / math.sqrt(k)).to(torch.bfloat16)
        self.inputs = {"mainloop.a": self.x, "mainloop.b": self.w}
        self.facts = {"M": m, "K": k, "N": n, "gated": gated}
        self.ref = reference_module.swiglu(self.inputs, self.facts)["epilogue.y"]
        self.flops = 2 * m * n * k

    def output(self, cols: int):
        import torch
        return torch.full((self.shape[0], cols), float("nan"), dtype=torch.bfloat16, device="cuda")


def monolithic_launch(served, bucket: dict, case: Case, cols: int):
    """A launcher of the winning configuration linked as the monolithic control, writing a NaN-poisoned output of
    the case's M (its tensor maps encoded at M: the kernel is linked for the bucket)."""
    from pipelink.spec import load_spec
    kernel = pipelink.link(load_spec(served.spec, facts={**served.facts, **bucket}, settings=served.settings),
                           mode="monolithic")
    runtime = Runtime(kernel.cubin, kernel.manifest)
    y = case.output(cols)
    m, k = case.x.shape
    at = {"mainloop.a": [m, k], "epilogue.y": [m, cols]}
    return (lambda: runtime.launch_arrays([case.x, case.w, y], shapes=at)), y, kernel


def matmul_peak(reps: int = 20) -> dict:
    import torch
    a = torch.randn(8192, 8192, device="cuda").to(torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda").to(torch.bfloat16)
    t = timing.summarize(timing.time_launches(lambda i: a @ b, reps=reps, warmup=5))
    return {"what": "cuBLAS bf16 8192x8192x8192 (torch.matmul)", "tflops": 2 * 8192 ** 3 / t["median_ms"] / 1e9, **t}


def stock_cutlass(out: Path) -> list[dict]:
    """bench/cutlass_ref: a stock CUTLASS 128x256x64 cooperative GEMM, built here with nvcc."""
    script = ROOT / "bench" / "cutlass_ref" / "run.sh"
    if not script.exists():
        return [{"skipped": "bench/cutlass_ref/run.sh missing"}]
    try:
        from pipelink.backend.toolchain import cutlass_include
        proc = subprocess.run(["bash", str(script), str(cutlass_include()), str(out)], capture_output=True,
                              text=True, timeout=900)
    except Exception as exc:  # no headers, no nvcc, timeout: recorded, not fatal
        return [{"skipped": f"{type(exc).__name__}: {exc}"}]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        rows.append({"error": proc.stderr[-2000:], "exit": proc.returncode})
    return rows


def chosen(served, spec: Path, median_ms) -> dict:
    """The winning configuration as earlier tables recorded it (tile_m, tile_n, stages, order, group, cluster,
    split: bench/readme_results.py reads these), with where it came from."""
    from pipelink.spec import load_spec
    linked = load_spec(served.spec, facts=served.facts, settings=served.settings)
    f = linked.facts
    return {"tile_m": f["tile_m"], "tile_n": f["tile_n"], "stages": f["stages"], "order": linked.schedule.order,
            "group": linked.schedule.group, "cluster": linked.launch.cluster, "split": linked.schedule.split,
            "facts": served.facts, "settings": served.settings, "spec": served.spec.name, "source": served.why,
            "tuned_median_ms": median_ms}


def tuned_operator(spec: Path, m: int, name: str, args, record: dict, key: str):
    """`pipelink tune` at M with the spec's [tune] searches, then the operator serving M; the search's outcomes
    go into ``record[key]``. Returns (op, what serves M, its bucket)."""
    from pipelink.tune import tune
    t0 = time.perf_counter()
    result = tune(spec, [{"M": m}], reps=args.search_reps, timeout=120, progress=False)
    (bucket,) = result.buckets
    record[key] = {**bucket.to_json(), "seconds": time.perf_counter() - t0, "cache": result.cache}
    counts = {}
    for o in bucket.outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    log(f"  tuned {len(bucket.outcomes)} configurations in {record[key]['seconds']:.0f} s: {counts}; winner "
        f"{bucket.winner.config.label if bucket.winner else None}")
    if bucket.winner is None:
        return None, None, bucket.bucket
    op = pipelink.op(spec, vary=("M",), name=name)
    served = op.config_for(op.linked_sizes({"M": m}))
    return op, served, bucket.bucket


def run_shape(name: str, shape: tuple, work: Path, packages: Path, args, ref_mod) -> dict:
    import torch
    m, k, n, gated = shape
    log(f"{name}: M={m} K={k} N={n} gated={gated}: inputs and fp32 reference")
    case = Case(shape, ref_mod)
    cols = case.cols
    record = {"shape": {"M": m, "K": k, "N": n, "gated": gated}, "flops": case.flops}

    # The tuner verifies every configuration in verify's watched child (a hang or crash of a new kernel is
    # reported there) before it times the verified ones; the operator serves the winner.
    spec = shapes.write_spec(work / name / "spec", packages, shape, BASE)
    op, served, bucket = tuned_operator(spec, m, f"qwen_{name}", args, record, "tune")
    if op is None:
        record["error"] = "no configuration passed the reference check"
        return record
    record["chosen"] = chosen(served, spec, record["tune"]["winner"]["median_ms"])
    log(f"  served: {served.facts} {served.settings} ({served.why})")

    # Everything on the same inputs, interleaved.
    fns = {"pipelink": lambda: op(case.x, case.w)}
    fns["monolithic"], y_mono, mono = monolithic_launch(served, bucket, case, cols)
    record["sass_identical"] = _sass(op.kernel_for(M=m)) == _sass(mono)
    fns["cublas+compiled_swiglu"] = lambda: ref_mod.cublas_then_compiled_swiglu(case.inputs, case.facts)
    fns["cublas"] = lambda: ref_mod.cublas_alone(case.inputs, case.facts)
    if gated:  # the GEMM part alone (identity epilogue), tuned for itself
        product = case.x.float() @ case.w.float().t()
        log("  the GEMM alone: tuned for itself")
        spec_alone = shapes.write_spec(work / name / "gemm_alone", packages, (m, k, n, 0), BASE)
        alone, served_alone, _ = tuned_operator(spec_alone, m, f"qwen_{name}_gemm_alone", args, record,
                                                "gemm_alone_tune")
        if alone is None:
            record["error"] = "no configuration of the GEMM alone passed the reference check"
            return record
        record["gemm_alone_chosen"] = chosen(served_alone, spec_alone,
                                             record["gemm_alone_tune"]["winner"]["median_ms"])
        fns["pipelink_gemm_alone"] = lambda: alone(case.x, case.w)
    for fn in fns.values():
        fn()  # compile (torch.compile) and warm everything before timing
    torch.cuda.synchronize()
    record["checks"] = {"pipelink": check(op(case.x, case.w), case.ref)}
    y_mono.fill_(float("nan"))
    fns["monolithic"]()
    torch.cuda.synchronize()
    record["checks"]["monolithic"] = check(y_mono, case.ref)
    if gated:
        record["checks"]["pipelink_gemm_alone"] = check(alone(case.x, case.w), product)
    # Enough launches for ~1 s of each callable: short kernels need many to resolve 0.1 %.
    reps = max(args.reps, min(1000, int(1000 / record["chosen"]["tuned_median_ms"])))
    record["reps"] = reps
    log(f"  timing {', '.join(fns)}: {reps} launches each, interleaved")
    with GpuSampler() as gpu:  # the clock and power the comparison ran at
        times = time_interleaved(fns, reps)
    record["times"], record["gpu_during_timing"] = times, gpu.summary()
    med = {k_: v_["median_ms"] for k_, v_ in times.items()}
    record["tflops"] = {k_: case.flops / v_ / 1e9 for k_, v_ in med.items()}
    record["ratios"] = {
        "linked_over_monolithic": med["pipelink"] / med["monolithic"],
        "linked_over_monolithic_paired": paired_ratio(times["pipelink"], times["monolithic"]),
        "speedup_vs_cublas_compiled_swiglu": med["cublas+compiled_swiglu"] / med["pipelink"],
        "speedup_vs_cublas_alone": med["cublas"] / med["pipelink"],
    }
    if gated:
        record["ratios"]["gemm_alone_speedup_vs_cublas"] = med["cublas"] / med["pipelink_gemm_alone"]
    log("  " + ", ".join(f"{k_} {v_:.4f} ms" for k_, v_ in med.items()))
    log("  " + ", ".join(f"{k_} {v_:.4f}" for k_, v_ in record["ratios"].items()))
    return record


def _sass(kernel) -> list[str]:
    from pipelink.backend.inspect import inspect_cubin, normalized_sass
    return normalized_sass(inspect_cubin(kernel.cubin, kernel.plan.entry)[0].instructions)


def plot(result: dict, path: Path) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    shapes = [s for s, r in result["shapes"].items() if "tflops" in r]
    kinds = ["pipelink", "monolithic", "cublas+compiled_swiglu", "cublas", "pipelink_gemm_alone"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.16
    for j, kind in enumerate(kinds):
        vals = [result["shapes"][s]["tflops"].get(kind, 0) for s in shapes]
        ax.bar([i + (j - 2) * width for i in range(len(shapes))], vals, width, label=kind)
    peak = result["peak"]["tflops"]
    ax.axhline(peak, color="k", ls="--", lw=1, label=f"cuBLAS 8192^3 ({peak:.0f} TFLOP/s, this run)")
    ax.set_xticks(range(len(shapes)), shapes, rotation=15, fontsize=8)
    ax.set_ylabel("TFLOP/s (GEMM FLOPs / median time)")
    ax.set_title(f"Fused gate/up + SwiGLU on {result['machine']['gpu']} ({result['git_revision'][:10]})")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--reps", type=int, default=40, help="timed launches of each callable, interleaved")
    ap.add_argument("--search-reps", type=int, default=30, help="timed launches per configuration in the search")
    ap.add_argument("--stock-cutlass", action="store_true", help="also build and run bench/cutlass_ref")
    ap.add_argument("--profile", default="", help="shapes whose chosen kernel is profiled with Nsight Compute")
    ap.add_argument("--resume", type=Path, help="continue this result of the same revision (a run cut by a device "
                    "call's limit): its timed shapes are kept, the rest run and are added")
    args = ap.parse_args()
    previous = resumed(args.resume, "qwen_mlp") if args.resume else None  # refused before any packing
    ref_mod = example("qwen_mlp/reference.py")

    work = Path(tempfile.mkdtemp(prefix="pl-qwen-"))
    log("packing gemm_mainloop (CuTe) and swiglu_store variants")
    packages = shapes.pack(work)
    log("bf16 matmul peak (cuBLAS 8192^3)")
    peak = matmul_peak()
    log(f"  {peak['tflops']:.0f} TFLOP/s")
    payload = {"peak": peak, "shapes": {}, "reps": args.reps, "timing": TIMING}
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    if previous:  # the first call's peak stays the table's; each call's is kept beside it
        payload, stamp = previous, args.resume.stem.rsplit("-", 1)[-1]
        args.out = args.resume.parent if args.out == RESULTS else args.out
    payload.setdefault("calls", []).append({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "peak": peak})
    results = payload["shapes"]
    for name in [n for n in args.shapes.split(",") if "ratios" not in results.get(n, {})]:
        try:
            results[name] = run_shape(name, SHAPES[name], work, packages, args, ref_mod)
        except Exception as exc:
            import traceback
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
            log(f"{name}: {results[name]['error']}")
        for r in results[name].get("tflops", {}):
            results[name].setdefault("pct_of_peak", {})[r] = 100 * results[name]["tflops"][r] / peak["tflops"]
        if name in args.profile.split(",") and "chosen" in results[name]:
            from pipelink.spec import load_spec
            c = results[name]["chosen"]
            spec = load_spec(work / name / "spec" / c["spec"], facts={**c["facts"], "M": SHAPES[name][0]},
                             settings=c["settings"])
            log("  ncu on the chosen configuration")
            v = pipelink.verify(spec, out_dir=work / name / "profile", bench=False, seeds=1, profile=True,
                                timeout=120, console=quiet_console())
            prof = v.rung("profile")
            results[name]["profile"] = {"status": prof.status, "detail": prof.detail[:600], "figures": prof.figures}
            if prof.status == "ok" and args.out:
                shutil.copyfile(prof.figures["report"], args.out / f"qwen_mlp-{name}.ncu-rep")
        write_result("qwen_mlp", payload, args.out, stamp=stamp)  # after every shape: a cut-off run keeps its data
    if args.stock_cutlass and "stock_cutlass" not in payload:
        log("stock CUTLASS 128x256x64 cooperative (bench/cutlass_ref)")
        payload["stock_cutlass"] = stock_cutlass(work)
        for row in payload["stock_cutlass"]:
            log(f"  {row}")
    path = write_result("qwen_mlp", payload, args.out, stamp=stamp)
    record = json.loads(path.read_text())
    png = plot(record, path.with_suffix(".png"))
    log(f"wrote {path}" + (f" and {png}" if png else ""))
    summary = {s: {"chosen": r.get("chosen"), "ratios": r.get("ratios"), "checks": r.get("checks")}
               for s, r in results.items()}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
